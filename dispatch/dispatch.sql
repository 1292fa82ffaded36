-- dispatch/dispatch.sql — every statement urt's dispatcher (SPEC C21,
-- include/urt/dispatch.h) sends to PostgreSQL, in one file for review.
--
-- dispatch/sqlgen.py turns it into C at build time (dispatch_sql.c/.h in the
-- build directory): each "-- migration N: title" section is one step of the
-- versioned schema, applied in order by urt_dispatch_migrate() in one
-- transaction under an advisory lock (dispatch/migrate.c); each
-- "-- statement NAME" section is prepared on every connection the dispatcher
-- opens, as urt_dispatch_NAME, with the parameters $1.. it uses (sent as
-- text). Comments stay here; the generator strips them.
--
-- The model (docs/dispatch.md): a strand is a durable work item. It is due
-- when its schedule has passed, nobody holds its lease (lease < now()) and it
-- has no exit value. Taking its lease sets lease = now() + the lease time (a
-- HOT update: nothing indexed changes), so a run that never reports back (its
-- process died) is retried once the lease expired; a run that fails moves the
-- schedule to now() + a random exponential backoff as it gives the lease
-- back; the lease release compares the lease with the value the take
-- returned, so a run whose lease was taken from it (it ran too long) is
-- detected, not applied.
-- Timestamps cross the wire as bigint microseconds since the Unix epoch: they
-- round-trip exactly whatever the sessions' DateStyle and TimeZone.

-- migration 1: the strands table and its due index
CREATE TABLE urt_strand (
    id       uuid        PRIMARY KEY DEFAULT gen_random_uuid(),
    kind     text        NOT NULL,
    payload  text        NOT NULL DEFAULT '',
    schedule timestamptz NOT NULL DEFAULT now(),
    lease    timestamptz NOT NULL DEFAULT now() - interval '1000 years',
    try      integer     NOT NULL DEFAULT 0,
    exitval  text,
    created  timestamptz NOT NULL DEFAULT now()
);
-- The scans read due strands in schedule order; finished strands (exitval
-- set) stay in the table for their owner to read and delete, out of the index.
CREATE INDEX urt_strand_due ON urt_strand (schedule) WHERE exitval IS NULL;

-- migration 2: priorities, attempts and dead letters, unique keys, cancellation
-- priority: among due strands a lower number runs first (the scans walk
-- urt_strand_due in (priority, schedule) order). max_attempts: a run that
-- fails (or whose lease expires) with try >= max_attempts moves the strand
-- to the dead letters: halted = 'failed', its last_error kept, never run
-- again until requeued; 0 = retried forever. halted = 'cancelled': taken out
-- before it started. key: at most one live (unfinished, not halted) strand
-- per key; the enqueue's key mode says what a second one does
-- (urt_dispatch_enqueue_items below).
ALTER TABLE urt_strand
    ADD COLUMN priority     integer NOT NULL DEFAULT 0,
    ADD COLUMN max_attempts integer NOT NULL DEFAULT 25 CHECK (max_attempts >= 0),
    ADD COLUMN last_error   text,
    ADD COLUMN halted       text CHECK (halted IN ('failed', 'cancelled')),
    ADD COLUMN halted_at    timestamptz,
    ADD COLUMN key          text;
DROP INDEX urt_strand_due;
CREATE INDEX urt_strand_due ON urt_strand (priority, schedule) WHERE exitval IS NULL AND halted IS NULL;
CREATE UNIQUE INDEX urt_strand_key ON urt_strand (key) WHERE key IS NOT NULL AND exitval IS NULL AND halted IS NULL;
CREATE INDEX urt_strand_halted ON urt_strand (halted, halted_at) WHERE halted IS NOT NULL;
ALTER TABLE urt_strand SET (fillfactor = 70);
-- One batch of strands (item i: kinds[i], payloads[i], keys[i] (NULL: no
-- key), due delays_us[i] from now, priorities[i], max_attempts[i]) in one
-- statement; then one NOTIFY channel, '+kind' per kind (the idle
-- dispatchers' wake-up). A keyed item whose key a live strand holds:
--   replace          a pending strand (lease free) takes the item's kind,
--                    payload, schedule, priority and attempts (its try count
--                    and last error reset); a running one keeps running and
--                    loses its key, and the item is inserted as a new strand;
--   preserve_schedule as replace, but a pending strand keeps its schedule;
--   keep             nothing changes: the live strand (pending or running)
--                    stays, the item is dropped.
-- A key given twice in one batch: the last item wins (replace) or the first
-- (keep). Returns per item (ord: its 1-based position) the strand's id and
-- what happened: 'inserted', 'replaced' or 'kept'.
CREATE FUNCTION urt_dispatch_enqueue_items(kinds text[], payloads text[], keys text[], delays_us bigint[],
                                           priorities integer[], attempts integer[], mode text, channel text)
RETURNS TABLE (ord bigint, id uuid, outcome text)
LANGUAGE plpgsql
SET enable_sort = on -- its own plans, not the control session's (statement scan_plan): 250 ms a call without
AS $fn$
DECLARE
    k text;
BEGIN
    IF mode NOT IN ('replace', 'preserve_schedule', 'keep') THEN
        RAISE EXCEPTION 'urt_dispatch_enqueue_items: mode "%" is not replace, preserve_schedule or keep', mode;
    END IF;
    FOR k IN SELECT DISTINCT x.kind FROM unnest(kinds) AS x(kind) LOOP
        PERFORM pg_notify(channel, '+' || k); -- sent at the commit
    END LOOP;
    IF NOT EXISTS (SELECT 1 FROM unnest(keys) AS x(key) WHERE x.key IS NOT NULL) THEN
        -- no keys: one INSERT
        RETURN QUERY
        WITH u AS MATERIALIZED (
            SELECT gen_random_uuid() AS id, x.*
            FROM unnest(kinds, payloads, delays_us, priorities, attempts)
                 WITH ORDINALITY AS x(kind, payload, delay_us, priority, max_attempts, ord)),
        n AS (
            INSERT INTO urt_strand (id, kind, payload, schedule, priority, max_attempts)
            SELECT u.id, u.kind, coalesce(u.payload, ''), now() + u.delay_us * interval '1 microsecond',
                   u.priority, u.max_attempts
            FROM u)
        SELECT u.ord, u.id, 'inserted'::text FROM u ORDER BY u.ord;
        RETURN;
    END IF;
    CREATE TEMP TABLE urt_dispatch_items (ord bigint, kind text, payload text, key text, delay_us bigint,
        priority integer, max_attempts integer, id uuid, outcome text) ON COMMIT DROP;
    INSERT INTO urt_dispatch_items (ord, kind, payload, key, delay_us, priority, max_attempts)
    SELECT x.ord, x.kind, coalesce(x.payload, ''), x.key, x.delay_us, x.priority, x.max_attempts
    FROM unnest(kinds, payloads, keys, delays_us, priorities, attempts)
         WITH ORDINALITY AS x(kind, payload, key, delay_us, priority, max_attempts, ord);
    -- one item per key: the last (replace: the earlier ones are answered as replaced) or the
    -- first (keep: the later ones are answered as kept), with the winner's id
    UPDATE urt_dispatch_items i SET outcome = CASE WHEN mode = 'keep' THEN 'kept' ELSE 'replaced' END
    WHERE i.key IS NOT NULL AND EXISTS (
        SELECT 1 FROM urt_dispatch_items j WHERE j.key = i.key
          AND (CASE WHEN mode = 'keep' THEN j.ord < i.ord ELSE j.ord > i.ord END));
    IF mode = 'keep' THEN
        UPDATE urt_dispatch_items i SET outcome = 'kept', id = s.id FROM urt_strand s
        WHERE i.outcome IS NULL AND s.key = i.key AND s.exitval IS NULL AND s.halted IS NULL;
    ELSE
        -- a running holder keeps running and gives its key up
        UPDATE urt_strand s SET key = NULL FROM urt_dispatch_items i
        WHERE i.outcome IS NULL AND s.key = i.key AND s.exitval IS NULL AND s.halted IS NULL AND s.lease >= now();
        WITH r AS (
            UPDATE urt_strand s
            SET kind = i.kind, payload = i.payload, priority = i.priority, max_attempts = i.max_attempts,
                try = 0, last_error = NULL,
                schedule = CASE WHEN mode = 'preserve_schedule' THEN s.schedule
                                ELSE now() + i.delay_us * interval '1 microsecond' END
            FROM urt_dispatch_items i
            WHERE i.outcome IS NULL AND s.key = i.key AND s.exitval IS NULL AND s.halted IS NULL
            RETURNING i.ord, s.id)
        UPDATE urt_dispatch_items i SET outcome = 'replaced', id = r.id FROM r WHERE i.ord = r.ord;
    END IF;
    UPDATE urt_dispatch_items i SET id = gen_random_uuid() WHERE i.outcome IS NULL;
    -- a key another enqueue inserted meanwhile (ON CONFLICT waits for it): kept
    WITH n AS (
        INSERT INTO urt_strand (id, kind, payload, key, schedule, priority, max_attempts)
        SELECT i.id, i.kind, i.payload, i.key, now() + i.delay_us * interval '1 microsecond', i.priority,
               i.max_attempts
        FROM urt_dispatch_items i WHERE i.outcome IS NULL
        ON CONFLICT (key) WHERE key IS NOT NULL AND exitval IS NULL AND halted IS NULL DO NOTHING
        RETURNING urt_strand.id)
    UPDATE urt_dispatch_items i SET outcome = 'inserted' FROM n WHERE i.id = n.id;
    UPDATE urt_dispatch_items i SET outcome = 'kept',
        id = (SELECT s.id FROM urt_strand s WHERE s.key = i.key AND s.exitval IS NULL AND s.halted IS NULL)
    WHERE i.outcome IS NULL;
    UPDATE urt_dispatch_items i SET id = w.id FROM urt_dispatch_items w
    WHERE i.id IS NULL AND i.key = w.key AND w.id IS NOT NULL;
    RETURN QUERY SELECT i.ord, i.id, i.outcome FROM urt_dispatch_items i ORDER BY i.ord;
    DROP TABLE urt_dispatch_items;
END $fn$;

-- statement scan
-- Due strands of this process's partition ($1..$2, inclusive uuid bounds)
-- whose kind it handles ($3), minus those it has queued or running ($4), in
-- (priority, schedule) order, at most $5. SKIP LOCKED: rows another process
-- is scanning or leasing right now are left to it. delay_us is how late the
-- strand is (from its schedule, or from its lease's end if a lease expired
-- on it). The priorities: p walks the distinct priorities of live strands
-- upwards (one descent of urt_strand_due each, only as far as the LIMIT
-- needs), and for each one the due strands are read in schedule order,
-- stopping at the first one not due — so strands scheduled in the future
-- are never read, whatever their number.
WITH RECURSIVE p(pr) AS (
    (SELECT priority FROM urt_strand WHERE exitval IS NULL AND halted IS NULL ORDER BY priority LIMIT 1)
    UNION ALL
    SELECT (SELECT priority FROM urt_strand
            WHERE exitval IS NULL AND halted IS NULL AND priority > p.pr ORDER BY priority LIMIT 1)
    FROM p WHERE p.pr IS NOT NULL
)
SELECT s.id::text,
       s.kind,
       (extract(epoch FROM clock_timestamp()
                - CASE WHEN s.lease > now() - interval '100 years' THEN s.lease ELSE s.schedule END)
        * 1000000)::bigint AS delay_us,
       s.lease > now() - interval '100 years' AS lease_expired
FROM p, LATERAL (
    SELECT id, kind, lease, schedule
    FROM urt_strand
    WHERE exitval IS NULL
      AND halted IS NULL
      AND priority = p.pr
      AND schedule < now()
      AND lease < now()
      AND id BETWEEN $1::uuid AND $2::uuid
      AND kind = ANY ($3::text[])
      AND id NOT IN (SELECT unnest($4::uuid[]))
    ORDER BY schedule
    LIMIT $5::integer
    FOR NO KEY UPDATE SKIP LOCKED) s
LIMIT $5::integer

-- statement scan_plan
-- Sent once per connect on the control connection (the scans' session),
-- before its first scan: no sorts in this session's plans. A queue table's
-- statistics are always wrong (strands come and go by the thousands between
-- autovacuum's ANALYZEs), and a table filled in one go and never analyzed
-- plans the scans as if it were empty: a bitmap of every due strand, then a
-- sort of all of them for the LIMIT — each scan O(backlog) (12 ms per scan
-- at 20,000 due strands, 84 ms at 100,000: the dispatcher ran at 45 % of
-- pgbench). Without sorts the only plan left is the one a scan wants
-- whatever the statistics: urt_strand_due in its order, stopping at the
-- LIMIT (0.3 ms). The control connection sends nothing else that sorts
-- (heartbeats, enqueues, wakes, cancels); the run connections (takes,
-- releases, the handlers' statements) keep the server's defaults.
SELECT set_config('enable_sort', 'off', false)

-- statement scan_old
-- The same over every partition, for strands late by more than $4
-- microseconds: a partition whose process died is worked off by the others
-- (takeover). $1 kinds, $2 skipped ids, $3 limit.
WITH RECURSIVE p(pr) AS (
    (SELECT priority FROM urt_strand WHERE exitval IS NULL AND halted IS NULL ORDER BY priority LIMIT 1)
    UNION ALL
    SELECT (SELECT priority FROM urt_strand
            WHERE exitval IS NULL AND halted IS NULL AND priority > p.pr ORDER BY priority LIMIT 1)
    FROM p WHERE p.pr IS NOT NULL
)
SELECT s.id::text,
       s.kind,
       (extract(epoch FROM clock_timestamp()
                - CASE WHEN s.lease > now() - interval '100 years' THEN s.lease ELSE s.schedule END)
        * 1000000)::bigint AS delay_us,
       s.lease > now() - interval '100 years' AS lease_expired
FROM p, LATERAL (
    SELECT id, kind, lease, schedule
    FROM urt_strand
    WHERE exitval IS NULL
      AND halted IS NULL
      AND priority = p.pr
      AND schedule < now() - $4::bigint * interval '1 microsecond'
      AND lease < now()
      AND kind = ANY ($1::text[])
      AND id NOT IN (SELECT unnest($2::uuid[]))
    ORDER BY schedule
    LIMIT $3::integer
    FOR NO KEY UPDATE SKIP LOCKED) s
LIMIT $3::integer

-- statement take
-- Takes the leases of the strands $1 (an array: one statement for every
-- take a run connection has waiting, dispatch/conn.h) for $2 microseconds
-- if they are still free, unfinished and not halted (SKIP LOCKED: a
-- concurrent taker wins, this one gets no row for it) and counts the try;
-- the schedule and every other indexed column stay, so the update is HOT
-- (fillfactor 70 keeps room in the pages): no index entry is written. If
-- this run never reports back, the strand is retried once the lease expired.
-- A strand whose tries
-- are used up already (try >= max_attempts > 0: the lease of its last run
-- expired, its process died) is not run: it moves to the dead letters.
-- Returns per strand taken: its position in $1 (ord), the lease and the
-- schedule (the run's compare-and-set keys), the try count, the
-- payload, and run = false for one moved to the dead letters.
-- The plan: the rows are found through the primary key (id = ANY), never
-- through urt_strand_due — "coalesce(exitval, halted) IS NULL" is the
-- liveness test written so that the planner cannot prove the due index's
-- predicate from it: on a table whose statistics say it is small (never
-- analyzed) it would otherwise read the whole due index for each take.
UPDATE urt_strand s
SET lease = CASE WHEN s.max_attempts > 0 AND s.try >= s.max_attempts THEN s.lease
                 ELSE now() + $2::bigint * interval '1 microsecond' END,
    try = CASE WHEN s.max_attempts > 0 AND s.try >= s.max_attempts THEN s.try ELSE s.try + 1 END,
    halted = CASE WHEN s.max_attempts > 0 AND s.try >= s.max_attempts THEN 'failed' END,
    halted_at = CASE WHEN s.max_attempts > 0 AND s.try >= s.max_attempts THEN now() END,
    last_error = CASE WHEN s.max_attempts > 0 AND s.try >= s.max_attempts
                      THEN 'attempts used up: the lease of its last run expired' ELSE s.last_error END
WHERE s.id = ANY (ARRAY(SELECT t.id FROM urt_strand t
                        WHERE t.id = ANY ($1::uuid[]) AND coalesce(t.exitval, t.halted) IS NULL AND t.lease < now()
                        FOR NO KEY UPDATE SKIP LOCKED))
RETURNING array_position($1::uuid[], s.id) AS ord,
          (extract(epoch FROM s.lease) * 1000000)::bigint AS lease_us,
          (extract(epoch FROM s.schedule) * 1000000)::bigint AS schedule_us,
          s.try,
          s.payload,
          s.halted IS NULL AS run,
          s.max_attempts,
          s.priority,
          s.last_error

-- statement release
-- A run that failed with reason $3: gives the lease back, keeps the reason
-- as last_error and moves the schedule to a random point within
-- min($4 * 2^min(try - 1, 20), $5) microseconds (exponential backoff: the
-- retry waits for it); when its tries are used up (try >= max_attempts > 0) the
-- strand moves to the dead letters (halted = 'failed'). One row (dead: it
-- moved), or none when the lease is no longer the one taken (violated: the
-- run outlived its lease).
UPDATE urt_strand
SET lease = now() - interval '1000 years',
    last_error = $3::text,
    schedule = now() + least($4::float8 * power(2, least(try - 1, 20)), $5::float8)
                       * random() * interval '1 microsecond',
    halted = CASE WHEN max_attempts > 0 AND try >= max_attempts THEN 'failed' END,
    halted_at = CASE WHEN max_attempts > 0 AND try >= max_attempts THEN now() END
WHERE id = $1::uuid
  AND (extract(epoch FROM lease) * 1000000)::bigint = $2::bigint
RETURNING halted IS NOT NULL AS dead

-- statement done
-- Runs that finished (an array each: ids $1, the leases their takes
-- returned $2, exit values $3; one statement for every release of this
-- kind a run connection has waiting): the exit value, and the lease given
-- back — each only if its lease is still the one taken. Returns the
-- positions in $1 of the strands released; a missing one was violated (the
-- run outlived its lease). Found through the primary key (id = ANY).
UPDATE urt_strand s
SET exitval = ($3::text[])[array_position($1::uuid[], s.id)],
    lease = now() - interval '1000 years'
WHERE s.id = ANY ($1::uuid[])
  AND (extract(epoch FROM s.lease) * 1000000)::bigint = ($2::bigint[])[array_position($1::uuid[], s.id)]
RETURNING array_position($1::uuid[], s.id) AS ord

-- statement nap
-- A run that naps for $4 microseconds: the try count starts again and the
-- schedule moves to now() + $4 — only if it still holds the value the take
-- set ($3); a wake (statement wake) that moved it meanwhile wins, so the
-- strand runs again at once. The lease is given back as in release.
UPDATE urt_strand
SET try = 0,
    lease = now() - interval '1000 years',
    schedule = CASE WHEN (extract(epoch FROM schedule) * 1000000)::bigint = $3::bigint
                    THEN now() + $4::bigint * interval '1 microsecond'
                    ELSE schedule END
WHERE id = $1::uuid
  AND (extract(epoch FROM lease) * 1000000)::bigint = $2::bigint

-- statement wake
-- Makes strand $1 due now. Strictly earlier than both its schedule and now()
-- (by a microsecond), so a nap's compare-and-set always sees the change, and
-- never later than the schedule it had (an overdue strand keeps its place).
UPDATE urt_strand
SET schedule = least(schedule, now()) - interval '1 microsecond'
WHERE id = $1::uuid
  AND exitval IS NULL
  AND halted IS NULL

-- statement enqueue
-- $4 new strands of kind $1 with payload $2, due $3 microseconds from now,
-- and the idle dispatchers' wake-up (NOTIFY $5, '+kind', sent at the
-- commit). Returns their ids.
WITH n AS (
    INSERT INTO urt_strand (kind, payload, schedule)
    SELECT $1::text, $2::text, now() + $3::bigint * interval '1 microsecond'
    FROM generate_series(1, $4::integer)
    RETURNING id
)
SELECT n.id::text FROM n, (SELECT pg_notify($5::text, '+' || $1::text)) w

-- statement enqueue_one
-- One strand per element of the arrays $1 kinds, $2 payloads, $3 delays
-- (µs), with no key, priority 0 and the default attempts: every
-- urt_dispatch_enqueue of a single strand waiting at the control
-- connection, in one statement (dispatch/conn.h, batches). $4 the wake-up
-- channel.
SELECT ord, id::text, outcome
FROM urt_dispatch_enqueue_items($1::text[], $2::text[], array_fill(NULL::text, ARRAY[cardinality($1::text[])]),
                                $3::bigint[], array_fill(0, ARRAY[cardinality($1::text[])]),
                                array_fill(25, ARRAY[cardinality($1::text[])]), 'replace', $4::text)

-- statement enqueue_items
-- A batch of distinct strands in one statement (the function of migration
-- 2): arrays $1 kinds, $2 payloads, $3 keys, $4 delays (µs), $5 priorities,
-- $6 max attempts; $7 the key mode; $8 the wake-up channel. Returns per
-- item its position, the strand's id and the outcome.
SELECT ord, id::text, outcome
FROM urt_dispatch_enqueue_items($1::text[], $2::text[], $3::text[], $4::bigint[], $5::integer[], $6::integer[],
                                $7::text, $8::text)

-- statement cancel
-- Cancels strand $1 if it has not started: live and its lease free (a
-- running strand, a finished one or a halted one is left alone). Returns
-- what it found: 'cancelled', 'running', 'finished', 'halted' (failed or
-- cancelled before), or no row for an unknown id.
WITH c AS (
    UPDATE urt_strand
    SET halted = 'cancelled', halted_at = now()
    WHERE id = $1::uuid AND exitval IS NULL AND halted IS NULL AND lease < now()
    RETURNING id
)
SELECT CASE WHEN EXISTS (SELECT 1 FROM c) THEN 'cancelled'
            WHEN s.exitval IS NOT NULL THEN 'finished'
            WHEN s.halted IS NOT NULL THEN 'halted'
            ELSE 'running' END
FROM urt_strand s WHERE s.id = $1::uuid

-- statement requeue
-- Brings strand $1 back from the dead letters (failed) or from cancelled:
-- due now, its try count reset (its last_error stays until the next
-- failure). A key that a live strand took meanwhile is dropped (the
-- requeued strand runs without it). Returns one row when it was halted.
UPDATE urt_strand s
SET halted = NULL,
    halted_at = NULL,
    try = 0,
    lease = now() - interval '1000 years',
    schedule = now(),
    key = CASE WHEN EXISTS (SELECT 1 FROM urt_strand o WHERE o.key = s.key AND o.exitval IS NULL
                                                         AND o.halted IS NULL) THEN NULL ELSE s.key END
WHERE s.id = $1::uuid AND s.halted IS NOT NULL
RETURNING s.id::text

-- statement notify
-- The partition heartbeat: payload $2 (the partition number) on channel $1.
SELECT pg_notify($1::text, $2::text)

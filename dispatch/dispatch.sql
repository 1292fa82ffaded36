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
-- has no exit value. Taking its lease sets lease = now() + the lease time and
-- moves its schedule to now() + a random exponential backoff, so a run that
-- never reports back (its process died) is retried after both passed; the
-- lease release compares the lease with the value the take returned, so a run
-- whose lease was taken from it (it ran too long) is detected, not applied.
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

-- statement scan
-- Due strands of this process's partition ($1..$2, inclusive uuid bounds)
-- whose kind it handles ($3), minus those it has queued or running ($4), in
-- schedule order, at most $5. SKIP LOCKED: rows another process is scanning
-- or leasing right now are left to it. delay_us is how late the strand is
-- (from its schedule, or from its lease's end if a lease expired on it).
SELECT id::text,
       kind,
       (extract(epoch FROM clock_timestamp()
                - CASE WHEN lease > now() - interval '100 years' THEN lease ELSE schedule END)
        * 1000000)::bigint AS delay_us,
       lease > now() - interval '100 years' AS lease_expired
FROM urt_strand
WHERE exitval IS NULL
  AND lease < now()
  AND schedule < now()
  AND id BETWEEN $1::uuid AND $2::uuid
  AND kind = ANY ($3::text[])
  AND NOT (id = ANY ($4::uuid[]))
ORDER BY schedule
LIMIT $5::integer
FOR NO KEY UPDATE SKIP LOCKED

-- statement scan_plan
-- Sent once per connect on the control connection (the scans' session),
-- before its first scan: no sorts in this session's plans. A queue table's
-- statistics are always wrong (strands come and go by the thousands between
-- autovacuum's ANALYZEs), and a table filled in one go and never analyzed
-- plans the scans as if it were empty: a bitmap of every due strand, then a
-- sort of all of them for the LIMIT — each scan O(backlog) (12 ms per scan
-- at 20,000 due strands, 84 ms at 100,000: the dispatcher ran at 45 % of
-- pgbench). Without sorts the only plan left is the one a scan wants
-- whatever the statistics: urt_strand_due in schedule order, stopping at
-- the LIMIT (0.3 ms). The control connection sends nothing else that sorts
-- (heartbeats, enqueues, wakes); the run connections (takes, releases, the
-- handlers' statements) keep the server's defaults.
SELECT set_config('enable_sort', 'off', false)

-- statement scan_old
-- The same over every partition, for strands late by more than $4
-- microseconds: a partition whose process died is worked off by the others
-- (takeover). $1 kinds, $2 skipped ids, $3 limit.
SELECT id::text,
       kind,
       (extract(epoch FROM clock_timestamp()
                - CASE WHEN lease > now() - interval '100 years' THEN lease ELSE schedule END)
        * 1000000)::bigint AS delay_us,
       lease > now() - interval '100 years' AS lease_expired
FROM urt_strand
WHERE exitval IS NULL
  AND lease < now()
  AND schedule < now() - $4::bigint * interval '1 microsecond'
  AND kind = ANY ($1::text[])
  AND NOT (id = ANY ($2::uuid[]))
ORDER BY schedule
LIMIT $3::integer
FOR NO KEY UPDATE SKIP LOCKED

-- statement take
-- Takes the lease of strand $1 for $2 microseconds if it is still free and
-- unfinished (SKIP LOCKED: a concurrent taker wins, this one gets no row),
-- counts the try and reschedules the strand to a random point within
-- min($3 * 2^min(try, 20), $4) microseconds (exponential backoff: if this run
-- never reports back, the strand is retried after the lease and the backoff).
-- Returns the lease and the new schedule (the run's compare-and-set keys),
-- the try count and the payload.
UPDATE urt_strand
SET lease = now() + $2::bigint * interval '1 microsecond',
    try = try + 1,
    schedule = now() + least($3::float8 * power(2, least(try, 20)), $4::float8)
                       * random() * interval '1 microsecond'
WHERE id = (SELECT id FROM urt_strand WHERE id = $1::uuid FOR NO KEY UPDATE SKIP LOCKED)
  AND exitval IS NULL
  AND lease < now()
RETURNING (extract(epoch FROM lease) * 1000000)::bigint AS lease_us,
          (extract(epoch FROM schedule) * 1000000)::bigint AS schedule_us,
          try,
          payload

-- statement release
-- A run that failed: gives the lease back (the backoff schedule the take set
-- stays: the retry waits for it). One row, or none when the lease is no
-- longer the one taken (violated: the run outlived its lease).
UPDATE urt_strand
SET lease = now() - interval '1000 years'
WHERE id = $1::uuid
  AND (extract(epoch FROM lease) * 1000000)::bigint = $2::bigint

-- statement done
-- A run that finished: its exit value $3, and the lease given back.
UPDATE urt_strand
SET exitval = $3::text,
    lease = now() - interval '1000 years'
WHERE id = $1::uuid
  AND (extract(epoch FROM lease) * 1000000)::bigint = $2::bigint

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

-- statement enqueue
-- $4 new strands of kind $1 with payload $2, due $3 microseconds from now.
-- Returns their ids.
INSERT INTO urt_strand (kind, payload, schedule)
SELECT $1::text, $2::text, now() + $3::bigint * interval '1 microsecond'
FROM generate_series(1, $4::integer)
RETURNING id::text

-- statement notify
-- The partition heartbeat: payload $2 (the partition number) on channel $1.
SELECT pg_notify($1::text, $2::text)

-- bench/dispatch-pgbench.sql — pgbench's transaction for bench/dispatch-pgbench.sh: the
-- dispatcher's own take and release statements (dispatch/dispatch.sql: take, then done
-- with a NULL exit value so that the strand can be taken again), with the values
-- urt-dispatch's defaults send (120 s lease, 1 s backoff unit, 600 s cap), on a strand of
-- the client's own range (ids md5(n)::uuid; no two clients contend for one strand).
\set n :client_id * 1000 + random(1, 1000)
UPDATE urt_strand SET lease = now() + 120000000::bigint * interval '1 microsecond', try = try + 1, schedule = now() + least(1000000::float8 * power(2, least(try, 20)), 600000000::float8) * random() * interval '1 microsecond' WHERE id = (SELECT id FROM urt_strand WHERE id = md5(:n::text)::uuid FOR NO KEY UPDATE SKIP LOCKED) AND exitval IS NULL AND lease < now() RETURNING (extract(epoch FROM lease) * 1000000)::bigint AS lease_us, (extract(epoch FROM schedule) * 1000000)::bigint AS schedule_us, try, payload \gset
UPDATE urt_strand SET exitval = NULL, lease = now() - interval '1000 years' WHERE id = md5(:n::text)::uuid AND (extract(epoch FROM lease) * 1000000)::bigint = :lease_us;

/*
 * tools/urt-dispatch/demo.h — the demo handlers of urt-dispatch and the
 * helpers its commands share.
 *
 * Demo kinds (payload in parentheses):
 *   noop          done at once
 *   sleep (MS)    done after MS ms (urt_io_sleep: the worker is not held)
 *   fail (N)      fails while its try count is <= N, then done
 *   nap (N:MS)    naps MS ms until it has run N times, then done
 *   record (MS)   records its run in urt_dispatch_runs (start and the
 *                 strand's lease, then end after MS ms), done with this pid
 *                 as exit value; the run log that `urt-dispatch verify`
 *                 and the tests check (DEMO_OVERLAPS)
 *   hang (N)      blocks its worker while its try count is <= N (apoptosis
 *                 ends the process), then done
 * record and nap use urt_dispatch_run_sql (statements on the dispatcher's run
 * connections, their callbacks as tasks of the run's job).
 */
#ifndef URT_DISPATCH_TOOL_DEMO_H
#define URT_DISPATCH_TOOL_DEMO_H

#include <stdint.h>

#include <urt/io.h>
#include <urt/urt.h>

#define DEMO_KINDS "noop,sleep,fail,nap,record,hang"

/* The run log's table (created by `run` when record or nap is handled), and
 * a trigger that ends a run's row when its lease is given back (the release
 * statement lowers the lease): a run whose handler could not record its end
 * (its last statement was cancelled by the run's budget, or failed) still
 * ends where the dispatcher says the run ended. Only the row of the lease
 * being released is ended: a dead process's run keeps its lease's end.
 * Created only if the table is missing: the trigger's DDL locks urt_strand,
 * and while a fleet runs that would deadlock against its releases (which
 * hold urt_strand's row lock and then, in the trigger, want the run log). */
#define DEMO_RUNS_DDL                                                                                         \
    "DO $do$ BEGIN IF to_regclass('urt_dispatch_runs') IS NULL THEN "                                         \
    "CREATE TABLE urt_dispatch_runs ("                                                                        \
    " run bigserial PRIMARY KEY, strand uuid NOT NULL, pid integer NOT NULL, partition integer NOT NULL,"     \
    " try integer NOT NULL, old boolean NOT NULL,"                                                           \
    " started timestamptz NOT NULL DEFAULT clock_timestamp(), ended timestamptz, lease_until timestamptz);"   \
    "CREATE INDEX urt_dispatch_runs_strand ON urt_dispatch_runs (strand);"                                   \
    "CREATE FUNCTION urt_dispatch_runs_end() RETURNS trigger LANGUAGE plpgsql AS $fn$ BEGIN"                 \
    " UPDATE urt_dispatch_runs SET ended = clock_timestamp()"                                                \
    " WHERE strand = NEW.id AND ended IS NULL AND lease_until = OLD.lease; RETURN NULL; END $fn$;"           \
    "CREATE TRIGGER urt_dispatch_runs_end AFTER UPDATE OF lease ON urt_strand FOR EACH ROW"                  \
    " WHEN (NEW.lease < OLD.lease) EXECUTE FUNCTION urt_dispatch_runs_end();"                                \
    "END IF; END $do$"

/* Two runs of one strand overlap when their intervals do: from its start to
 * its end, or to the end of its lease for a run that never recorded its end
 * (its process died, or its last statement failed) — a run may not go on
 * past its lease (the release would find it violated). */
#define DEMO_OVERLAPS                                                                                         \
    "SELECT count(*) FROM urt_dispatch_runs a JOIN urt_dispatch_runs b ON a.strand = b.strand AND a.run < b.run" \
    " WHERE tstzrange(a.started, greatest(a.started, coalesce(a.ended, a.lease_until)))"                      \
    " && tstzrange(b.started, greatest(b.started, coalesce(b.ended, b.lease_until)))"

/* Registers the handler of demo kind `kind` on d. 0, or -EINVAL for a kind
 * that is not a demo kind (message recorded as by urt_dispatch_handle). */
int demo_register(urt_dispatch *d, const char *kind, uint32_t partition);

#endif

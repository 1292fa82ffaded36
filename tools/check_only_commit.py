#!/usr/bin/env python3
"""tools/check_only_commit.py URT_LOAD — test 'urt-load --only commit_stored_c4'.

commit_stored_c<N> for an N the tables do not list shares one generic entry;
the summary mode once started its child under that entry's name, so
`--only commit_stored_c4` ran the bare `commit_stored` (N from CLIENTS, 16 by
default) and reported it as that. Checks that the child ran the name asked
for: the results carry it, and no group commit gathered more than its 4
clients (commits_per_sync <= 4, with a margin: the ratio is taken from
counters read at the window's two ends, so a sync that began before the
window can bring its commits into it; CI once read 4.01. The bare
commit_stored's 16 clients give about 15.9).
"""
import json
import os
import subprocess
import sys

env = dict(os.environ, WORKERS="2", DURATION_MS="1000")  # a 200 ms window saw no commit under a parallel durable load
env.pop("CLIENTS", None)
r = subprocess.run([sys.argv[1], "--json", "--only", "commit_stored_c4"], capture_output=True, text=True,
                   env=env, timeout=120)
if r.returncode != 0:
    sys.exit("urt-load exited %d:\n%s" % (r.returncode, r.stderr))
results = json.loads(r.stdout)["results"]
names = {x["workload"] for x in results}
if names != {"commit_stored_c4"}:
    sys.exit("results name %s, not commit_stored_c4" % sorted(names))
per_sync = [x["value"] for x in results if x["metric"] == "commits_per_sync"]
if len(per_sync) != 1 or not 0 < per_sync[0] <= 4.5:
    sys.exit("commits_per_sync %s: not a run of 4 clients" % per_sync)
print("commit_stored_c4: %s commits per sync" % per_sync[0])

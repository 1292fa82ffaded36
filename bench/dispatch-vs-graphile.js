// bench/dispatch-vs-graphile.js — graphile-worker's side of
// bench/dispatch-vs-graphile.sh (urt's side: bench/dispatch-bench.c): one
// Node process, one worker pool (runTaskList) with graphile-worker's own
// high-throughput settings (its docs' "Performance" page: a local queue of
// 500 jobs, completeJobBatchDelay 0, failJobBatchDelay 0), the same two
// measurements:
//
//   node dispatch-vs-graphile.js throughput N
//       N no-op jobs added with ONE add_jobs call (graphile-worker's batch
//       SQL API: one statement), the pool already running (idle); the time
//       from the call to the last job's completion (the jobs table empty).
//       Then: every job ran exactly once in the process (each payload index
//       seen once) and, in the database, every job was locked once and
//       deleted once (pg_stat_user_tables: n_tup_upd = n_tup_del = N) and
//       none is left.
//   node dispatch-vs-graphile.js latency RATE N
//       N jobs added one at a time (one add_job call each through the
//       pool, not waiting for the previous one) at RATE per second; for
//       each, the time from just before its add_job call to the start of
//       its task function.
//
// Environment: DATABASE_URL, CONNS (the pool's connections: maxPoolSize and
// the pg.Pool's max, the LISTEN connection included), POOL (concurrentJobs),
// LOCAL_QUEUE (default 500). Prints one line "key value ..." for the script.
"use strict";
const { Pool } = require("pg");
const { runTaskList, runMigrations } = require("graphile-worker");

const [mode, a1, a2] = process.argv.slice(2);
const CONNS = +(process.env.CONNS || 5);
const POOL = +(process.env.POOL || 32);
const LOCAL_QUEUE = +(process.env.LOCAL_QUEUE || 500);
const connectionString = process.env.DATABASE_URL;
const sleep = (ms) => new Promise((r) => setTimeout(r, ms));
const now = () => process.hrtime.bigint();

async function main() {
  const pool = new Pool({ connectionString, max: CONNS });
  pool.on("error", (e) => console.error("pool error:", e.message));
  const preset = {
    worker: {
      connectionString,
      concurrentJobs: POOL,
      maxPoolSize: CONNS,
      localQueue: { size: LOCAL_QUEUE },
      completeJobBatchDelay: 0,
      failJobBatchDelay: 0,
    },
  };
  await runMigrations({ preset, pgPool: pool });
  let runs = 0;
  let dup = 0;
  const seen = new Uint8Array(2000001);
  const t0 = [];
  const lat = [];
  const tasks = {
    bench_noop: (p) => {
      runs++;
      if (seen[p.i]++) dup++;
    },
    bench_lat: (p) => {
      lat[p.i] = Number(now() - t0[p.i]) / 1e6;
      runs++;
    },
  };
  const workerPool = runTaskList({ preset }, tasks, pool);
  await sleep(1000); // connected and idle, as dispatch-bench waits
  let out;
  let ok = true;
  if (mode === "throughput") {
    const n = +a1;
    const specs = [];
    for (let i = 0; i < n; i++) specs.push({ identifier: "bench_noop", payload: { i } });
    const json = JSON.stringify(specs);
    const s = now();
    await pool.query(
      "select 1 from graphile_worker.add_jobs(array(select json_populate_recordset(null::graphile_worker.job_spec, $1::json)))",
      [json],
    );
    const e = now();
    while (runs < n) await sleep(1);
    for (;;) {
      const { rows } = await pool.query("select count(*)::int as c from graphile_worker._private_jobs");
      if (rows[0].c === 0) break;
      await sleep(1);
    }
    const f = now();
    const secs = Number(f - s) / 1e9;
    ok = runs === n && dup === 0;
    out = `throughput jobs ${n} enqueue_ms ${(Number(e - s) / 1e6).toFixed(1)} total_s ${secs.toFixed(3)} ` +
      `jobs_per_s ${(n / secs).toFixed(0)} runs ${runs} dup ${dup}`;
  } else if (mode === "latency") {
    const rate = +a1;
    const n = +a2;
    const step = 1e9 / rate;
    const start = now() + 1000000n;
    for (let i = 0; i < n; i++) {
      const due = start + BigInt(Math.round(i * step));
      for (;;) {
        const left = Number(due - now()) / 1e6;
        if (left <= 0) break;
        if (left > 1.5) await sleep(left - 1);
        else await new Promise(setImmediate);
      }
      t0[i] = now();
      pool.query("select graphile_worker.add_job('bench_lat', json_build_object('i', $1::int))", [i])
        .catch((e) => { console.error("add_job:", e.message); ok = false; });
    }
    const end = Date.now() + 300000;
    while (runs < n && Date.now() < end) await sleep(2);
    if (runs < n) {
      ok = false;
      out = `latency error only ${runs} of ${n} ran within 300 s`;
    } else {
      const v = lat.slice(0, n).sort((x, y) => x - y);
      out = `latency n ${n} rate ${rate} p50_ms ${v[Math.floor(n / 2)].toFixed(3)} ` +
        `p99_ms ${v[Math.floor(n * 0.99)].toFixed(3)} max_ms ${v[n - 1].toFixed(3)}`;
    }
  } else {
    throw new Error("usage: dispatch-vs-graphile.js throughput N | latency RATE N");
  }
  await workerPool.gracefulShutdown();
  await pool.end();
  if (mode === "throughput" && ok) {
    // the database's counters, once the pool's backends have exited (they flush at exit)
    const check = new Pool({ connectionString, max: 1 });
    for (let i = 0; i < 100; i++) {
      const { rows } = await check.query(
        "select count(*)::int as c from pg_stat_activity where datname = current_database() and pid <> pg_backend_pid()");
      if (rows[0].c === 0) break;
      await sleep(100);
    }
    const { rows } = await check.query(
      "select n_tup_upd::int as upd, n_tup_del::int as del, " +
      "(select count(*)::int from graphile_worker._private_jobs) as left_ " +
      "from pg_stat_user_tables where relid = 'graphile_worker._private_jobs'::regclass");
    await check.end();
    const n = +a1;
    out += ` db_locked ${rows[0].upd} db_deleted ${rows[0].del} db_left ${rows[0].left_}`;
    ok = rows[0].upd === n && rows[0].del === n && rows[0].left_ === 0;
  }
  console.log(`${out} result ${ok ? "ok" : "FAILED"}`);
  process.exit(ok ? 0 : 1);
}

main().catch((e) => {
  console.error(e);
  process.exit(1);
});

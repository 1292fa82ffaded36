#!/usr/bin/env python3
"""man/mkman.py — writes the section-3 man pages of urt from the public headers.

    python3 man/mkman.py [SRCDIR]          (re)write man/*.3 and man/urt.7
    python3 man/mkman.py --check [SRCDIR]  exit 1 if any written page would change

Each page covers one family of functions (PAGES below: the page's name, its
header, its functions, a one-line summary). The SYNOPSIS is the header's own
declarations (URT_API ... ;), the DESCRIPTION is the header's doc comment of
each function (and, on the first page of a header, the header's opening
comment), so the pages say what the headers say. The other functions of a
family get a one-line `.so` page. urt.7 is written from man/urt.7.in with the
README's configuration table inserted. The section-1 pages (urt-load.1,
urt-trace.1, urt-wal.1) are written by hand. man/check_man.py (test
'man_pages', suite 'docs') checks coverage, synopses and `man --warnings`.
"""
import os
import re
import sys

VERSION_RE = re.compile(r"version\s*:\s*'([^']+)'")
DATE = "2026-11-23"

# page name, header, functions (in order), NAME summary, see also
PAGES = [
    ("urt_runtime_create", "runtime.h", ["urt_runtime_create", "urt_runtime_destroy", "urt_runtime_config"],
     "create and destroy a urt runtime", ["urt_config_init", "urt_runtime_features", "urt_task_submit"]),
    ("urt_runtime_features", "runtime.h", ["urt_runtime_features", "urt_features_describe", "urt_runtime_backend"],
     "what the start-up probe found: the backend and its features", ["urt_runtime_create", "urt_stats_snapshot"]),
    ("urt_task_submit", "task.h", ["urt_task_init", "urt_task_submit", "urt_spawn", "urt_spawn_ex",
                                   "urt_current_worker"],
     "initialise and submit tasks", ["urt_task_submit_to", "urt_lane_create", "urt_job_create", "urt_runtime_create"]),
    ("urt_task_submit_to", "task.h", ["urt_task_submit_to", "urt_spawn_to", "urt_worker_node", "urt_node_worker"],
     "run tasks on a given worker or NUMA node", ["urt_task_submit", "urt_lane_create_on", "urt_task_submit_at"]),
    ("urt_task_submit_at", "task.h", ["urt_task_submit_at", "urt_spawn_at"],
     "run a task at a point in time", ["urt_task_submit", "urt_task_submit_to", "urt_io_sleep"]),
    ("urt_lane_create", "lane.h", ["urt_lane_create", "urt_lane_create_on", "urt_lane_submit", "urt_lane_spawn", "urt_lane_pending",
                                   "urt_lane_destroy"],
     "lanes: tasks that run one at a time, in order", ["urt_task_submit", "urt_tx_begin"]),
    ("urt_job_create", "job.h", ["urt_job_options_init", "urt_job_create", "urt_job_submit", "urt_job_spawn",
                                 "urt_job_close", "urt_task_job", "urt_job_release"],
     "jobs: groups of tasks with one completion", ["urt_job_cancel", "urt_task_submit"]),
    ("urt_job_cancel", "job.h", ["urt_job_cancel", "urt_job_abort", "urt_job_cancelled", "urt_job_poll",
                                 "urt_job_wait"],
     "cancel or abort a job, wait for it, poll it", ["urt_job_create", "urt_graph_start"]),
    ("urt_graph_create", "graph.h", ["urt_graph_options_init", "urt_graph_create", "urt_graph_add_step",
                                     "urt_graph_add_exchange", "urt_graph_add_output", "urt_graph_add_input",
                                     "urt_graph_prepare", "urt_graph_release"],
     "task graphs: steps joined by exchanges", ["urt_graph_start", "urt_graph_emit", "urt_graph_pull",
                                                 "urt_job_create"]),
    ("urt_graph_start", "graph.h", ["urt_graph_start", "urt_graph_job", "urt_graph_cancel", "urt_graph_wait",
                                    "urt_graph_step_state", "urt_graph_step_partitions", "urt_graph_step_stats"],
     "run a task graph, cancel it, wait for it, watch its steps", ["urt_graph_create", "urt_job_cancel"]),
    ("urt_graph_emit", "graph.h", ["urt_graph_partition", "urt_graph_partitions", "urt_graph_of",
                                   "urt_graph_step_of", "urt_graph_task_state", "urt_graph_next", "urt_graph_emit",
                                   "urt_graph_complete", "urt_graph_stopping"],
     "inside a task graph's step: partitions, units in and out, early completion",
     ["urt_graph_create", "urt_graph_pull"]),
    ("urt_graph_pull", "graph.h", ["urt_graph_in_port", "urt_graph_out_port", "urt_graph_pull", "urt_graph_push",
                                   "urt_graph_finish", "urt_graph_unit_release", "urt_graph_async_done"],
     "task graph processors: ports and asynchronous work", ["urt_graph_create", "urt_graph_emit"]),
    ("urt_tx_begin", "tx.h", ["urt_tx_options_init", "urt_tx_begin", "urt_tx_submit", "urt_tx_spawn",
                              "urt_tx_abort", "urt_tx_log", "urt_tx_state", "urt_tx_id", "urt_task_tx",
                              "urt_tx_release"],
     "transactions: tasks, abort and their end", ["urt_tx_commit", "urt_lane_create", "urt_log_commit"]),
    ("urt_tx_commit", "tx.h", ["urt_tx_commit"],
     "commit a transaction", ["urt_tx_begin", "urt_log_commit"]),
    ("urt_cond_add", "watcher.h", ["urt_cond_init", "urt_cond_add", "urt_cond_cancel", "urt_watcher_stats"],
     "conditional tasks run by the watcher thread", ["urt_task_submit", "urt_admission_stats"]),
    ("urt_admission_stats", "admission.h", ["urt_admission_stats"],
     "the admission limit: at most max_pending_tasks tasks pending", ["urt_config_init", "urt_task_submit",
                                                                       "urt_watchdog_set_callback"]),
    ("urt_watchdog_set_callback", "watchdog.h", ["urt_watchdog_set_callback", "urt_dump_state"],
     "the watchdog: tasks that run too long; every worker's state", ["urt_config_init", "urt_admission_stats",
                                                                      "urt_blocking_submit"]),
    ("urt_log_commit", "log.h", ["urt_log_commit", "urt_commit_marker", "urt_log_on_durable", "urt_log_stats",
                                 "urt_log_checkpoint"],
     "durable commits on the write-ahead log", ["urt_log_recover", "urt_durability_source", "urt_tx_commit"]),
    ("urt_durability_source", "log.h", ["urt_durability_source", "urt_durability_notify"],
     "an external durability source for commits", ["urt_log_commit"]),
    ("urt_log_recover", "log.h", ["urt_log_recover"],
     "replay and repair a log directory", ["urt_log_commit", "urt-wal"]),
    ("urt_config_init", "config.h", ["urt_config_init", "urt_config_validate", "urt_config_set",
                                     "urt_config_from_env", "urt_config_describe"],
     "runtime configuration", ["urt_runtime_create"]),
    ("urt_stats_snapshot", "stats.h", ["urt_stats_snapshot", "urt_stats_free", "urt_latency_kind_name"],
     "per-worker counters and latency histograms", ["urt_runtime_features", "urt-trace"]),
    ("urt_io_read", "io.h", ["urt_io_init", "urt_io_init_ex", "urt_io_read", "urt_io_write", "urt_io_readv",
                             "urt_io_writev", "urt_io_fsync", "urt_io_openat", "urt_io_close", "urt_io_statx",
                             "urt_io_fallocate"],
     "asynchronous file I/O for tasks, continued on their worker",
     ["urt_io_accept", "urt_io_cancel", "urt_task_submit"]),
    ("urt_io_accept", "io.h", ["urt_io_accept", "urt_io_connect", "urt_io_recv", "urt_io_recv_bufring",
                               "urt_io_send", "urt_io_sendmsg", "urt_io_recvmsg", "urt_io_poll"],
     "asynchronous socket I/O for tasks", ["urt_io_read", "urt_bufring_create", "urt_io_cancel"]),
    ("urt_io_cancel", "io.h", ["urt_io_sleep", "urt_io_sleep_until", "urt_io_set_timeout", "urt_io_cancel",
                               "urt_io_flags", "urt_io_buffer", "urt_io_worker"],
     "sleeps, deadlines and cancel of task I/O; completion details", ["urt_io_read", "urt_io_accept"]),
    ("urt_bufring_create", "io.h", ["urt_bufring_create", "urt_bufring_put", "urt_bufring_destroy",
                                    "urt_io_register_file", "urt_io_unregister_file", "urt_io_register_buffers"],
     "buffer rings, registered files and buffers of a worker", ["urt_io_accept", "urt_runtime_features"]),
    ("urt_blocking_submit", "blocking.h", ["urt_blocking_init", "urt_blocking_submit", "urt_blocking_spawn",
                                           "urt_blocking_ran"],
     "run a function that blocks on the blocking pool, continue on a worker",
     ["urt_blocking_stats", "urt_task_submit", "urt_lane_create", "urt_job_create", "urt_tx_begin", "urt_io_read"]),
    ("urt_blocking_stats", "blocking.h", ["urt_blocking_stats"],
     "the blocking pool's threads, queue and latencies", ["urt_blocking_submit", "urt_stats_snapshot"]),
    ("urt_batch_start", "batch.h", ["urt_batch_options_init", "urt_batch_start", "urt_batch_job",
                                    "urt_batch_release"],
     "the batch executor: one statement over parameter files, and the transactional load",
     ["urt_batch_stmt_done", "urt_batch_wait", "urt_job_create", "urt_tx_begin", "urt_io_read"]),
    ("urt_batch_stmt_done", "batch.h", ["urt_batch_stmt_done", "urt_batch_stmt_error", "urt_batch_aborting"],
     "complete or fail a statement of a batch", ["urt_batch_start", "urt_batch_wait"]),
    ("urt_batch_wait", "batch.h", ["urt_batch_wait", "urt_batch_poll", "urt_batch_cancel", "urt_batch_error",
                                   "urt_batch_stats"],
     "wait for, cancel and inspect a batch", ["urt_batch_start", "urt_batch_stmt_done"]),
    ("urt_last_error", "common.h", ["urt_last_error", "urt_now_ns"],
     "the last error message of this thread; the clock", []),
    ("urt_dispatch_create", "dispatch.h", ["urt_dispatch_options_init", "urt_dispatch_options_from_env",
                                           "urt_dispatch_migrate", "urt_dispatch_create", "urt_dispatch_handle",
                                           "urt_dispatch_start", "urt_dispatch_stop", "urt_dispatch_destroy"],
     "durable work shared by many processes through PostgreSQL",
     ["urt_dispatch_run_done", "urt_dispatch_enqueue", "urt_dispatch_metrics", "urt_admission_stats", "urt-dispatch"]),
    ("urt_dispatch_run_done", "dispatch.h", ["urt_dispatch_run_done", "urt_dispatch_run_nap", "urt_dispatch_run_fail",
                                             "urt_dispatch_run_strand", "urt_dispatch_run_job", "urt_dispatch_run_sql"],
     "a run of a strand: its result and its statements", ["urt_dispatch_create", "urt_job_create"]),
    ("urt_dispatch_enqueue", "dispatch.h", ["urt_dispatch_enqueue", "urt_dispatch_enqueue_items",
                                            "urt_dispatch_cancel", "urt_dispatch_requeue", "urt_dispatch_wake"],
     "add strands (batches, priorities, keys, attempts), cancel, requeue, make a strand due now",
     ["urt_dispatch_create", "urt_dispatch_run_done", "urt-dispatch"]),
    ("urt_dispatch_metrics", "dispatch.h", ["urt_dispatch_metrics", "urt_dispatch_partitions",
                                            "urt_dispatch_partition_range"],
     "a dispatcher's delay metrics and partition map", ["urt_dispatch_create", "urt-dispatch"]),
    ("urt_deprecated", "deprecated.h", ["urt_io_init2", "urt_dispatch_done", "urt_dispatch_nap", "urt_dispatch_fail",
                                        "urt_dispatch_sql", "urt_graph_output", "urt_graph_input"],
     "names renamed before urt 1.0, kept for one release",
     ["urt_io_init_ex", "urt_dispatch_run_done", "urt_graph_add_input", "urt_task_submit_to", "urt_task_submit_at"]),
]

# The types each page shows (DATA TYPES), copied from its header with their comments.
TYPES = {
    "urt_runtime_create": ["enum urt_shutdown"],
    "urt_runtime_features": ["struct urt_features"],
    "urt_task_submit": ["enum urt_task_result", "urt_task_fn", "urt_task_cancel_fn", "struct urt_task"],
    "urt_job_create": ["urt_job_done_fn", "urt_job_ready_fn", "struct urt_job_options"],
    "urt_graph_create": ["urt_graph_step_fn", "urt_graph_done_fn", "urt_graph_release_fn",
                         "struct urt_graph_options", "struct urt_step_desc", "enum urt_exchange_kind",
                         "struct urt_exchange_desc"],
    "urt_graph_start": ["enum urt_step_state", "struct urt_graph_step_stats"],
    "urt_graph_emit": ["struct urt_graph_unit"],
    "urt_graph_pull": ["enum urt_proc_next", "struct urt_processor"],
    "urt_tx_begin": ["struct urt_tx_hooks", "struct urt_tx_options", "enum urt_tx_state"],
    "urt_tx_commit": ["enum urt_commit_response", "urt_commit_fn"],
    "urt_cond_add": ["urt_cond_check_fn", "urt_cond_body_fn", "urt_cond_cancel_fn", "struct urt_cond",
                     "struct urt_watcher_stats"],
    "urt_admission_stats": ["struct urt_admission_stats"],
    "urt_watchdog_set_callback": ["struct urt_watchdog_report", "urt_watchdog_fn"],
    "urt_log_commit": ["urt_log_commit_fn", "urt_durable_fn", "struct urt_log_stats"],
    "urt_durability_source": ["struct urt_durability_source"],
    "urt_log_recover": ["struct urt_log_record", "struct urt_log_channel_info", "struct urt_log_cut",
                        "struct urt_log_recover_ops", "struct urt_log_recovery"],
    "urt_io_read": ["urt_io_fn", "struct urt_io_private", "struct urt_io"],
    "urt_blocking_submit": ["urt_blocking_fn", "urt_blocking_done_fn", "struct urt_blocking_private",
                            "struct urt_blocking"],
    "urt_blocking_stats": ["struct urt_blocking_stats"],
    "urt_batch_start": ["enum urt_batch_format", "struct urt_batch_field", "struct urt_batch_block",
                        "struct urt_batch_stmt", "urt_batch_stmt_fn", "urt_batch_done_fn", "struct urt_batch_options"],
    "urt_batch_wait": ["struct urt_batch_stats"],
    "urt_config_init": ["enum urt_placement", "enum urt_log_sync", "enum urt_backend", "enum urt_ring_feature",
                        "struct urt_config"],
    "urt_stats_snapshot": ["enum urt_latency_kind", "struct urt_latency", "struct urt_worker_stats",
                           "struct urt_stats"],
    "urt_dispatch_create": ["struct urt_dispatch_options", "urt_dispatch_handler_fn", "urt_dispatch_metrics_fn",
                            "urt_dispatch_log_fn"],
    "urt_dispatch_run_done": ["struct urt_dispatch_strand", "struct urt_dispatch_sql_result", "urt_dispatch_sql_fn"],
    "urt_dispatch_enqueue": ["urt_dispatch_enqueued_fn", "struct urt_dispatch_item", "enum urt_dispatch_key_mode",
                             "enum urt_dispatch_outcome", "urt_dispatch_items_fn", "urt_dispatch_status_fn"],
    "urt_dispatch_metrics": ["struct urt_dispatch_dist", "struct urt_dispatch_metrics",
                             "struct urt_dispatch_partitions"],
}

SECTION = {"urt-wal": 1, "urt-trace": 1, "urt-load": 1, "urt-dispatch": 1}


def parse_header(path):
    """Returns (opening comment text, {function: (declaration, doc comment)}) in order."""
    src = open(path).read()
    opening = ""
    m = re.match(r"\s*/\*(.*?)\*/", src, re.S)
    if m:
        opening = m.group(1)
    decls = {}
    # tokens: comments and URT_API declarations, in order
    # The doc comment of a declaration: the comment right before it; else the
    # last comment starting a line since the previous declaration (one that
    # documents a typedef or enum and the function after it); else none (the
    # function shares the comment of the declaration before it).
    last_comment, comment_end, block_comment, prev = None, 0, None, None
    for m in re.finditer(r"/\*.*?\*/|URT_API\s+[^;]*;|\n\s*#[^\n]*", src, re.S):
        tok = m.group(0)
        if tok.startswith("/*"):
            last_comment, comment_end = tok, m.end()
            if m.start() == 0 or src[m.start() - 1] == "\n":
                block_comment = tok
            continue
        if tok.lstrip().startswith("#"):
            last_comment = None
            continue
        decl = " ".join(tok[len("URT_API"):].split())
        name = re.search(r"(urt_\w+)\s*\(", decl).group(1)
        if last_comment is not None and not src[comment_end:m.start()].strip():
            doc = last_comment
        elif block_comment is not None:
            doc = block_comment
        else:
            doc = ("see", prev)
        decls[name] = (decl, doc)
        last_comment, block_comment, prev = None, None, name
    return opening, decls


def type_text(src, name):
    """The definition of a type in a header, verbatim: 'struct x' / 'enum x' up
    to its closing '};', or the typedef line of a name."""
    if name.startswith(("struct ", "enum ")):
        m = re.search(r"^%s \{\n.*?^\};" % re.escape(name), src, re.S | re.M)
    else:
        m = re.search(r"^typedef [^;]*\b%s\b[^;]*;" % re.escape(name), src, re.M)
    if not m:
        raise SystemExit("mkman: type %s not found" % name)
    return m.group(0)


def header_decls(srcdir):
    out = {}
    for h in sorted(os.listdir(os.path.join(srcdir, "include", "urt"))):
        if h.endswith(".h"):
            _, d = parse_header(os.path.join(srcdir, "include", "urt", h))
            for k, (decl, _) in d.items():
                out[k] = (h, decl)
    return out


def esc(text):
    text = text.replace("\\", "\\e").replace("-", "\\-")
    return text


def line(text):
    text = esc(text)
    if text.startswith(".") or text.startswith("'"):
        text = "\\&" + text
    return text


def comment_lines(comment):
    body = comment.strip()
    if body.startswith("/*"):
        body = body[2:]
    if body.endswith("*/"):
        body = body[:-2]
    out = []
    for ln in body.split("\n"):
        ln = re.sub(r"^\s*\* ?", "", ln, count=1) if ln.strip().startswith("*") else ln.strip()
        out.append(ln.rstrip())
    while out and not out[0].strip():
        out.pop(0)
    while out and not out[-1].strip():
        out.pop()
    return out


ITEM_RE = re.compile(r"^\s*(\d+\.|\*|-|[A-Z_]+[A-Z0-9_]*\s+—|\"[^\"]+\"\s+—)\s")


def prose(lines, skip_first_title=False):
    """Roff for a comment: paragraphs at blank lines, list items at '1.', '-', 'NAME —'."""
    out = []
    if skip_first_title and lines and re.match(r"^urt/\w+\.h —", lines[0].strip()):
        lines = lines[:]
        lines[0] = re.sub(r"^urt/\w+\.h —\s*", "", lines[0].strip())
        lines[0] = lines[0][:1].upper() + lines[0][1:]
    para = []
    mode = "PP"

    def flush():
        nonlocal para
        if para:
            text = " ".join(p.strip() for p in para)
            if mode.startswith("IP"):
                tag = mode[3:]
                if tag.startswith('"') and tag.endswith('"'):
                    tag = "\\(lq" + esc(tag[1:-1]) + "\\(rq"
                elif tag != "\\(bu":
                    tag = esc(tag)
                out.append('.IP "%s" 4' % tag)
            else:
                out.append(".PP")
            out.append(line(text))
        para = []

    for ln in lines:
        if not ln.strip():
            flush()
            mode = "PP"
            continue
        m = ITEM_RE.match(ln)
        if m:
            flush()
            tag = m.group(1)
            if tag.endswith("—"):
                mode = "IP " + tag[:-1].strip()
                para = [ln[m.end():]]
            else:
                mode = "IP " + ("\\(bu" if tag in ("*", "-") else tag)
                para = [ln[m.end():]]
            continue
        para.append(ln)
    flush()
    return out


def synopsis(decl):
    """A prototype as roff lines: function name bold, parameter names italic, wrapped at commas."""
    m = re.match(r"(.*?)(urt_\w+)\((.*)\);$", decl)
    ret, name, params = m.group(1), m.group(2), m.group(3)
    parts = [p.strip() for p in params.split(",")]
    fmt = []
    for p in parts:
        pm = re.match(r"(.*?)(\w+)$", p)
        if p == "void" or not pm or not pm.group(1).strip():
            fmt.append(esc(p))
        else:
            fmt.append(esc(pm.group(1)) + "\\fI" + pm.group(2) + "\\fP")
    head = esc(ret) + "\\fB" + name + "\\fP("
    lines, cur = [], head
    width = len(ret) + len(name) + 1
    indent = " " * min(width, 24)
    cur_w = width
    for i, (f, p) in enumerate(zip(fmt, parts)):
        piece = f + ("," if i < len(parts) - 1 else ");")
        pw = len(p) + 1
        if cur_w + pw + 1 > 72 and cur != head:
            lines.append(cur.rstrip())
            cur, cur_w = indent, len(indent)
        cur += piece + " "
        cur_w += pw + 1
    lines.append(cur.rstrip())
    return lines


def see_also(names, exclude=()):
    refs = []
    for n in names:
        if n in exclude:
            continue
        refs.append("\\fB%s\\fP(%d)" % (esc(n), SECTION.get(n, 3)))
    refs.append("\\fBurt\\fP(7)")
    return ",\n".join(refs)


def th(name, sect, version):
    return ['.\\" Generated by man/mkman.py from include/urt/*.h: edit the headers or the script, not this file.',
            '.TH %s %d %s "urt %s" "urt Programmer\'s Manual"' % (esc(name.upper()), sect, DATE, version)]


def page(srcdir, version, entry, seen_headers):
    pname, header, funcs, summary, also = entry
    opening, decls = parse_header(os.path.join(srcdir, "include", "urt", header))
    out = th(pname, 3, version)
    out += [".SH NAME", esc(", ".join(funcs)) + " \\- " + esc(summary)]
    out += [".SH LIBRARY", "urt (\\fIliburt\\fP, \\fI\\-lurt\\fP; \\fBpkg\\-config \\-\\-cflags \\-\\-libs urt\\fP)"]
    out += [".SH SYNOPSIS", ".nf", ".B #include <urt/urt.h>"]
    for f in funcs:
        out.append(".PP")
        out += synopsis(decls[f][0])
    out += [".fi"]
    if TYPES.get(pname):
        src = open(os.path.join(srcdir, "include", "urt", header)).read()
        out += [".SH DATA TYPES", "From \\fI<urt/%s>\\fP:" % header, ".PP", ".EX"]
        for i, t in enumerate(TYPES[pname]):
            if i:
                out.append("")
            out += [line(ln) if ln else "" for ln in type_text(src, t).split("\n")]
        out.append(".EE")
    out += [".SH DESCRIPTION"]
    if header not in seen_headers:
        seen_headers.add(header)
        out += prose(comment_lines(opening), skip_first_title=True)
        out.append(".PP")
        out.append("The functions:")
    for f in funcs:
        decl, doc = decls[f]
        out.append(".TP")
        out.append("\\fB%s\\fP()" % esc(f))
        if isinstance(doc, tuple):
            out.append("Described with \\fB%s\\fP() above." % esc(doc[1]))
        elif doc:
            out.append(line(" ".join(l.strip() for l in comment_lines(doc))))
        else:
            out.append("See <urt/%s>." % header)
    out += [".SH RETURN VALUE",
            "Functions returning \\fBint\\fP return 0 (or a count, where said) on success and a negative",
            "\\fIerrno\\fP value on failure, as listed above for each function; they never set",
            "\\fIerrno\\fP. Every failing call records a one\\-line reason for",
            "\\fBurt_last_error\\fP(3), per thread.",
            ".SH THREADS",
            "\"Any thread\" means the call is safe from workers and from threads that are not workers;",
            "\"worker only\" means from a task running on a worker of the runtime.",
            ".SH SEE ALSO",
            see_also(also)]
    out += [".PP", "The header \\fI<urt/%s>\\fP carries the structures and types named here." % header]
    return "\n".join(out) + "\n"


def readme_config_table(srcdir):
    rows = []
    text = open(os.path.join(srcdir, "README.md")).read()
    sec = text.split("## Configuration", 1)[1].split("\n## ", 1)[0]
    for ln in sec.split("\n"):
        m = re.match(r"^\| `(\w+)` \| (.*?) \| (.*) \|$", ln)
        if m:
            rows.append(m.groups())
    out = []
    for name, default, meaning in rows:
        meaning = meaning.replace("`", "")
        default = default.replace("`", "")
        out.append(".TP")
        out.append("\\fB%s\\fP (\\fBURT_%s\\fP; default: %s)" % (esc(name), esc(name.upper()), esc(default)))
        out.append(line(meaning))
    return out


def render(srcdir):
    version = VERSION_RE.search(open(os.path.join(srcdir, "meson.build")).read()).group(1)
    files = {}
    seen = set()
    for entry in PAGES:
        files[entry[0] + ".3"] = page(srcdir, version, entry, seen)
        for f in entry[2]:
            if f != entry[0]:
                files[f + ".3"] = ".so man3/%s.3\n" % entry[0]
    tmpl = open(os.path.join(srcdir, "man", "urt.7.in")).read()
    tmpl = tmpl.replace("@VERSION@", version).replace("@DATE@", DATE)
    tmpl = tmpl.replace("@CONFIG_TABLE@\n", "\n".join(readme_config_table(srcdir)) + "\n")
    files["urt.7"] = tmpl
    return files


def main():
    args = sys.argv[1:]
    check = "--check" in args
    args = [a for a in args if a != "--check"]
    srcdir = args[0] if args else os.path.dirname(os.path.dirname(os.path.abspath(__file__)))
    files = render(srcdir)
    stale = []
    for name, text in sorted(files.items()):
        path = os.path.join(srcdir, "man", name)
        old = open(path).read() if os.path.exists(path) else None
        if old != text:
            stale.append(name)
            if not check:
                with open(path, "w") as f:
                    f.write(text)
    if check and stale:
        print("man pages out of date with the headers (run python3 man/mkman.py): " + " ".join(stale))
        return 1
    if not check:
        print("wrote %d pages (%d changed)" % (len(files), len(stale)))
    return 0


if __name__ == "__main__":
    sys.exit(main())

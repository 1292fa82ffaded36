#!/usr/bin/env python3
"""Layer checker (docs/design.md, "Layers"): every #include "..." points down
the layer order, never up, and tools/ and bench/ include only the public
headers <urt/...> plus their own local headers.

graph/, batch/, dispatch/ (parts of the library written on its public API)
may include <urt/...>, base/ and their own headers.

Layer order, bottom first (a layer may include itself and every layer below;
a layer is a folder, and sched/core/ is a layer of its own under sched/):

    base/ < bpf/ < backend/ < sched/core/ < sched/ < io/ < tx/ < runtime/

    base/        error recording, the clock, heap, histograms (every layer may
                 include it)
    bpf/         USDT probes (probes.h) and the BPF programs with their loader
    backend/     how a worker waits, is woken and does I/O: backend/uring/,
                 backend/portable/
    sched/core/  workers, queues, submission, the sleeper, the timer facility,
                 the run path, the worker's I/O table
    sched/       the core's clients: lanes, jobs, admission, the watcher and
                 watchdog, the blocking pool (the core calls them through
                 struct sched_client_ops, filled by runtime/sched_clients.c)
    io/          tasks' I/O
    tx/          transactions, the write-ahead log
    runtime/     lifecycle, configuration, topology, statistics, the log's API

Inside backend/: only backend/ itself includes an implementation's folder
(backend/uring/..., backend/portable/...); the layers above speak to the backend's interface
(backend/backend.h: operations, not SQEs): outside backend/ no file
includes <liburing.h> nor names io_uring's API in its code (io_uring_*,
IORING_*, IOSQE_*; comments and strings may).

include/urt/ (public headers) may include only <urt/...> and system headers.
It also finds re-declarations of runtime's private urt__error() outside
runtime/ and base/ (a file that re-declares it reaches up into runtime/
without an include).

Known violations are listed in scripts/layers-allow.txt, one a line:
    <file> -> <included header or symbol> | <reason>
They are accepted but printed on stdout as debt. A violation not listed
fails the check (exit 1, one line per violation); so does a listed line that
no longer matches anything (the debt was paid: delete the line).

Every source file of the library (the layers and graph/, batch/, dispatch/)
opens with its design: a comment whose first line names the file by its path
("sched/core/worker.c — ..."); a file moved without its header fails.

Usage: check_layers.py [SOURCE_ROOT]   (default: the parent of scripts/)
"""
import os
import re
import sys

LAYERS = ["base", "bpf", "backend", "sched/core", "sched", "io", "tx", "runtime"]
RANK = {name: i for i, name in enumerate(LAYERS)}
BACKEND_IMPLS = ["backend/uring", "backend/portable"]    # only backend/ includes these
CLIENTS = ["tools", "bench"]          # public API + own local headers only
# Parts of the library written on its public API (task graphs, the batch
# executor, dispatch): <urt/...>, base/ (error recording, clock, heap,
# histograms) and their own local headers; nothing of sched/, tx/, runtime/.
API_CLIENTS = ["graph", "batch", "dispatch"]
PUBLIC = "include/urt"
PRIVATE_SYMBOLS = ["urt__error"]      # runtime's private functions
PRIVATE_HOME = {"runtime", "base"}    # where they may be declared

INCLUDE_RE = re.compile(r'^\s*#\s*include\s*([<"])([^>"]+)[>"]')
# a declaration or definition: a return type, then the name, at the start of a line
REDECL_RE = re.compile(r'^\s*(?:extern\s+|static\s+)?(?!return\b)[A-Za-z_]\w*[\s\*]+(%s)\s*\(' % "|".join(PRIVATE_SYMBOLS))


def sources(root, top):
    for dirpath, dirnames, filenames in os.walk(os.path.join(root, top)):
        dirnames[:] = sorted(d for d in dirnames if not d.startswith("build"))
        for f in sorted(filenames):
            if f.endswith((".c", ".h")):
                yield os.path.relpath(os.path.join(dirpath, f), root)


def top_dir(rel):
    return rel.split("/", 1)[0]


def layer_of(rel):
    """The layer a path belongs to: its longest layer prefix, or None."""
    best = None
    for name in LAYERS:
        if rel == name or rel.startswith(name + "/"):
            if best is None or len(name) > len(best):
                best = name
    return best


def layer_sources(root, layer):
    """The sources of one layer (sched/ without sched/core/)."""
    for rel in sources(root, layer):
        if layer_of(rel) == layer:
            yield rel


def load_allow(path):
    allow = {}
    if not os.path.exists(path):
        return allow
    with open(path) as fh:
        for n, line in enumerate(fh, 1):
            line = line.strip()
            if not line or line.startswith("#"):
                continue
            m = re.match(r'^(\S+)\s*->\s*(\S+)\s*\|\s*(.+)$', line)
            if not m:
                print(f"{os.path.basename(path)}:{n}: malformed line (want: FILE -> HEADER | reason)")
                sys.exit(1)
            allow[(m.group(1), m.group(2))] = [m.group(3), n, False]
    return allow


def check(root):
    found = []   # (file, line, target, message)

    for layer in LAYERS:
        for rel in layer_sources(root, layer):
            here = RANK[layer]
            with open(os.path.join(root, rel), errors="replace") as fh:
                for n, text in enumerate(fh, 1):
                    m = INCLUDE_RE.match(text)
                    if m and m.group(1) == '"':
                        target = m.group(2)
                        t = layer_of(target)
                        if "/" not in target:
                            continue  # local ("urt_trace.h") or generated by the build ("urt.skel.h")
                        if t in RANK and RANK[t] > here:
                            found.append((rel, n, target,
                                          f"layer {layer}/ may not include layer {t}/ (above it)"))
                        elif t not in RANK:
                            found.append((rel, n, target,
                                          f"layer {layer}/ includes {target}, which is in no layer"))
                        elif layer != "backend" and any(target.startswith(b + "/") for b in BACKEND_IMPLS):
                            found.append((rel, n, target,
                                          f"layer {layer}/ reaches into a backend's implementation "
                                          f"(only backend/ includes it; use the backend's interface)"))
                    r = REDECL_RE.match(text)
                    if r and layer not in PRIVATE_HOME and not text.lstrip().startswith(("*", "//", "/*")):
                        found.append((rel, n, r.group(1),
                                      f"re-declares runtime's private {r.group(1)}(): layer {layer}/ may not reach into runtime/"))

    found += check_backend_names(root)
    found += check_sched_core(root)
    found += check_headers(root)

    for client in CLIENTS + API_CLIENTS:
        allowed = "<urt/...>, base/ and its own local headers" if client in API_CLIENTS \
            else "<urt/...> and its own local headers"
        for rel in sources(root, client):
            d = os.path.dirname(rel)
            with open(os.path.join(root, rel), errors="replace") as fh:
                for n, text in enumerate(fh, 1):
                    m = INCLUDE_RE.match(text)
                    if not m:
                        continue
                    kind, target = m.groups()
                    if kind == '"':
                        local = os.path.normpath(os.path.join(d, target))
                        if os.path.dirname(local) == d and os.path.exists(os.path.join(root, local)):
                            continue
                        if client in API_CLIENTS and (top_dir(target) == "base" or top_dir(target) == client):
                            continue
                        found.append((rel, n, target, f"{client}/ may include only {allowed}"))
                    elif layer_of(target) in RANK or top_dir(target) in CLIENTS + API_CLIENTS:
                        found.append((rel, n, target, f"{client}/ may include only {allowed}"))
                    r = REDECL_RE.match(text)
                    if r:
                        found.append((rel, n, r.group(1),
                                      f"re-declares runtime's private {r.group(1)}(): {client}/ may use only <urt/...>"))

    for rel in sources(root, PUBLIC):
        with open(os.path.join(root, rel), errors="replace") as fh:
            for n, text in enumerate(fh, 1):
                m = INCLUDE_RE.match(text)
                if m and (m.group(1) == '"' or layer_of(m.group(2)) in RANK):
                    found.append((rel, n, m.group(2),
                                  f"public headers may include only <urt/...> and system headers"))
    return found


URING_NAME_RE = re.compile(r'\b(io_uring_\w+|IORING_\w+|IOSQE_\w+)')


def code_only(text, in_comment):
    """text without comments and string literals; whether a /* */ comment is open at its end."""
    out, i = [], 0
    while i < len(text):
        if in_comment:
            j = text.find("*/", i)
            if j < 0:
                return "".join(out), True
            i, in_comment = j + 2, False
        elif text.startswith("/*", i):
            in_comment, i = True, i + 2
        elif text.startswith("//", i):
            break
        elif text[i] in "\"'":
            q, i = text[i], i + 1
            while i < len(text) and text[i] != q:
                i += 2 if text[i] == "\\" else 1
            i += 1
        else:
            out.append(text[i])
            i += 1
    return "".join(out), in_comment


def check_backend_names(root):
    """Above backend/: no <liburing.h>, no io_uring names in code (the seam is backend/backend.h)."""
    found = []
    for layer in LAYERS:
        if layer == "backend":
            continue
        for rel in layer_sources(root, layer):
            in_comment = False
            with open(os.path.join(root, rel), errors="replace") as fh:
                for n, text in enumerate(fh, 1):
                    m = INCLUDE_RE.match(text)
                    if m and m.group(2) == "liburing.h":
                        found.append((rel, n, "liburing.h", f"layer {layer}/ includes io_uring's header "
                                                             f"(only backend/ may; use backend/backend.h)"))
                        continue
                    code, in_comment = code_only(text, in_comment)
                    u = URING_NAME_RE.search(code)
                    if u:
                        found.append((rel, n, u.group(1), f"layer {layer}/ names io_uring's {u.group(1)} "
                                                          f"(only backend/ may; use backend/backend.h)"))
    return found


# Inside sched/: the core's clients (docs/design.md, "Inside sched/"). The
# core (sched/core/) is a layer below them, so it cannot include them (it calls
# them through struct sched_client_ops, filled by runtime/sched_clients.c); the
# clients may use each other, but not in a cycle. Files of a client module:
SCHED_CLIENTS = {
    "admission": ["sched/admission.c", "sched/admission.h"],
    "job": ["sched/job.c", "sched/job.h"],
    "lane": ["sched/lane.c", "sched/lane.h"],
    "watcher": ["sched/watcher.c", "sched/watcher.h", "sched/watcher_int.h", "sched/cond.c"],
    "watchdog": ["sched/watchdog.c", "sched/watchdog_pass.h"],
    "blocking": ["sched/blocking.c", "sched/blocking.h", "sched/blocking_int.h", "sched/blocking_life.c",
                 "sched/blocking_off.c"],
}


def sched_includes(root, rel):
    out = []
    with open(os.path.join(root, rel), errors="replace") as fh:
        for n, text in enumerate(fh, 1):
            m = INCLUDE_RE.match(text)
            if m and m.group(1) == '"' and layer_of(m.group(2)) == "sched":
                out.append((n, m.group(2)))
    return out


def check_sched_core(root):
    found = []
    module_of = {f: mod for mod, files in SCHED_CLIENTS.items() for f in files}
    edges = {}
    for rel in layer_sources(root, "sched"):
        mod = module_of.get(rel)
        if mod is None:
            found.append((rel, 1, rel, "a file of sched/ that belongs to no client module "
                                       "(add it to SCHED_CLIENTS in scripts/check_layers.py)"))
            continue
        for n, target in sched_includes(root, rel):
            tmod = module_of.get(target)
            if mod and tmod and tmod != mod:
                edges.setdefault(mod, {}).setdefault(tmod, (rel, n, target))
    # a cycle among the clients: depth-first search over the module graph
    state = {}

    def visit(m, path):
        state[m] = 1
        for t, where in sorted(edges.get(m, {}).items()):
            if state.get(t) == 1:
                cyc = path[path.index(t):] + [t] if t in path else [m, t]
                found.append((where[0], where[1], where[2],
                              "the scheduler's clients include each other in a cycle: " + " -> ".join(cyc)))
            elif not state.get(t):
                visit(t, path + [t])
        state[m] = 2

    for m in sorted(SCHED_CLIENTS):
        if not state.get(m):
            visit(m, [m])
    return found


def check_headers(root):
    """Each library source opens with a comment naming its own path."""
    found = []
    for top in sorted({l.split("/")[0] for l in LAYERS} | set(API_CLIENTS)):
        for rel in sources(root, top):
            if rel.endswith(".bpf.c"):
                continue
            with open(os.path.join(root, rel), errors="replace") as fh:
                head = [fh.readline() for _ in range(2)]
            if not head[0].startswith("/*") or (rel + " ") not in head[1] and not head[1].rstrip().endswith(rel):
                found.append((rel, 1, rel, "does not open with its design comment naming the file "
                                           "(\"/*\\n * %s — ...\")" % rel))
    return found


def describe(target, msg):
    if "names io_uring" in msg:
        return msg
    if msg.startswith(("re-declares", "does not open", "a file of sched/")):
        return msg
    return f"includes {target}, {msg}"


def main():
    root = sys.argv[1] if len(sys.argv) > 1 else os.path.join(os.path.dirname(os.path.abspath(__file__)), "..")
    root = os.path.abspath(root)
    allow_path = os.path.join(root, "scripts", "layers-allow.txt")
    allow = load_allow(allow_path)
    failures, debt = [], []
    for rel, n, target, msg in check(root):
        entry = allow.get((rel, target))
        if entry:
            entry[2] = True
            debt.append(f"debt: {rel}:{n} {describe(target, msg)} — {entry[0]}")
        else:
            failures.append(f"{rel}:{n} {describe(target, msg)}")
    for (rel, target), (reason, n, used) in sorted(allow.items(), key=lambda kv: kv[1][1]):
        if not used:
            failures.append(f"scripts/layers-allow.txt:{n}: {rel} -> {target} no longer occurs: delete the line")
    for line in debt:
        print(line)
    for line in failures:
        print(line)
    if failures:
        print(f"check_layers: {len(failures)} violation(s), {len(debt)} allowed (scripts/layers-allow.txt)")
        return 1
    print(f"check_layers: no violation; {len(debt)} allowed debt line(s) in scripts/layers-allow.txt")
    return 0


if __name__ == "__main__":
    sys.exit(main())

#!/usr/bin/env python3
"""man/check_man.py SRCDIR LIBURT_SO — test 'man_pages' (suite 'docs').

Checks that
  1. every exported urt_* function of LIBURT_SO (nm -D --defined-only) has a
     section-3 page in man/, its own or a `.so` link to its family's page;
  2. every page's SYNOPSIS prototypes are the header declarations (URT_API
     ...;), whitespace normalized, and every function named in a SYNOPSIS
     exists in a header;
  3. the pages are what man/mkman.py writes from today's headers;
  4. `man --warnings -l PAGE` prints nothing for any page (skipped, with a
     message, when man is not installed).
"""
import os
import re
import shutil
import subprocess
import sys
import tempfile

srcdir, lib = sys.argv[1], sys.argv[2]
mandir = os.path.join(srcdir, "man")
sys.path.insert(0, mandir)
import mkman  # noqa: E402

errors = []

# 1. coverage
nm = subprocess.run(["nm", "-D", "--defined-only", lib], capture_output=True, text=True, check=True).stdout
exported = sorted({ln.split()[-1] for ln in nm.splitlines() if re.search(r" T urt_\w+$", ln)})
pages3 = {f[:-2] for f in os.listdir(mandir) if f.endswith(".3")}
missing = [s for s in exported if s not in pages3]
for s in missing:
    errors.append("exported %s has no man page (add it to PAGES in man/mkman.py)" % s)
full = sorted(p for p in pages3 if not open(os.path.join(mandir, p + ".3")).read().startswith(".so "))
links = sorted(p for p in pages3 if p not in full)

# 2. synopses against the headers
decls = mkman.header_decls(srcdir)


def norm(s):
    return " ".join(s.replace("( ", "(").replace(" )", ")").split())


def roff_text(s):
    s = re.sub(r"\\f[BIRP]", "", s)
    s = s.replace("\\-", "-").replace("\\e", "\\").replace("\\&", "")
    return s


documented = set()
for p in full:
    text = open(os.path.join(mandir, p + ".3")).read()
    m = re.search(r"^\.SH SYNOPSIS\n(.*?)^\.SH ", text, re.S | re.M)
    if not m:
        errors.append("%s.3: no SYNOPSIS" % p)
        continue
    body = [ln for ln in m.group(1).splitlines() if not ln.startswith(".")]
    protos = [norm(roff_text(x)) + ";" for x in " ".join(body).split(";") if x.strip()]
    for proto in protos:
        fm = re.search(r"(urt_\w+)\(", proto)
        if not fm:
            errors.append("%s.3: cannot read SYNOPSIS entry %r" % (p, proto))
            continue
        name = fm.group(1)
        documented.add(name)
        if name not in decls:
            errors.append("%s.3: SYNOPSIS names %s, which no header declares" % (p, name))
        elif norm(decls[name][1]) != proto:
            errors.append("%s.3: SYNOPSIS of %s differs from include/urt/%s:\n  page:   %s\n  header: %s"
                          % (p, name, decls[name][0], proto, norm(decls[name][1])))
for p in links:
    target = open(os.path.join(mandir, p + ".3")).read().split()[1]
    if not os.path.exists(os.path.join(mandir, os.path.basename(target))):
        errors.append("%s.3: .so target %s is missing" % (p, target))
    elif p not in documented:
        errors.append("%s.3: links to %s, whose SYNOPSIS does not declare %s" % (p, target, p))
for name in decls:
    if name not in documented:
        errors.append("%s (include/urt/%s) is in no page's SYNOPSIS" % (name, decls[name][0]))

# 3. generated pages up to date
for name, text in mkman.render(srcdir).items():
    path = os.path.join(mandir, name)
    if not os.path.exists(path) or open(path).read() != text:
        errors.append("man/%s is out of date with the headers: run python3 man/mkman.py" % name)

# 4. man --warnings, in a man3/man7/man1 tree so that .so links resolve
man = shutil.which("man")
checked = 0
if not man:
    print("man not found (install man-db): skipping the man --warnings check")
else:
    with tempfile.TemporaryDirectory() as tmp:
        for f in os.listdir(mandir):
            m = re.match(r".*\.([137])$", f)
            if m:
                d = os.path.join(tmp, "man" + m.group(1))
                os.makedirs(d, exist_ok=True)
                shutil.copy(os.path.join(mandir, f), d)
        env = dict(os.environ, MANWIDTH="80", LC_ALL="C.UTF-8", MAN_DISABLE_SECCOMP="1")
        for d in sorted(os.listdir(tmp)):
            for f in sorted(os.listdir(os.path.join(tmp, d))):
                r = subprocess.run([man, "--warnings", "-l", os.path.join(d, f)], cwd=tmp, env=env,
                                   stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
                checked += 1
                if r.stderr.strip() or r.returncode:
                    errors.append("man --warnings -l %s/%s (exit %d):\n%s" % (d, f, r.returncode, r.stderr.rstrip()))

print("exported urt_* functions: %d; with a page: %d (%d full pages, %d .so links); "
      "header declarations: %d; pages checked with man --warnings: %d"
      % (len(exported), len(exported) - len(missing), len(full), len(links), len(decls), checked))
for e in errors:
    print("FAIL " + e)
sys.exit(1 if errors else 0)

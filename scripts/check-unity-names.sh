#!/usr/bin/env bash
# Lists the internal-linkage functions (anonymous namespace or `static`) that two or more source
# files of one target define under the same qualified name: scripts/check-unity-names.sh <dir>,
# <dir> a NON-unity build directory that is built (RelWithDebInfo: its full debug info also names
# the functions the optimizer inlined away, which the symbol table no longer shows).
#
# Why: unity builds (CMAKE_UNITY_BUILD, scripts/test.sh) compile up to 8 files of a target as one
# translation unit. Two same-named helpers with the same parameters then fail to compile, but two
# with different parameters compile as overloads, and a call in one file may silently pick the
# other file's function. Rename such helpers to say what each does (or give each file's helpers a
# named namespace). Run by hand after adding helpers; nothing runs it automatically. Exits
# non-zero when it lists anything.
set -euo pipefail
dir=${1:?usage: scripts/check-unity-names.sh <non-unity build dir>}
if grep -q '^CMAKE_UNITY_BUILD:BOOL=ON' "$dir/CMakeCache.txt" 2>/dev/null; then
  echo "check-unity-names: $dir is a unity build; give a build with CMAKE_UNITY_BUILD=OFF" >&2
  exit 2
fi

python3 - "$dir" <<'EOF'
import collections, os, re, subprocess, sys

build = sys.argv[1]
mangled_of = collections.defaultdict(set)  # (target, object) -> mangled internal function names
for top, dirs, files in os.walk(build):
    m = re.search(r"/CMakeFiles/([^/]+)\.dir(/|$)", top + "/")
    if not m:
        continue
    for f in files:
        if not f.endswith(".o"):
            continue
        obj = os.path.join(top, f)
        key = (m.group(1), os.path.relpath(obj, top[: top.index("/CMakeFiles/")]))
        # Local text symbols (functions that kept a body of their own) ...
        nm = subprocess.run(["nm", "--defined-only", obj], capture_output=True, text=True).stdout
        for line in nm.splitlines():
            parts = line.split()
            if len(parts) == 3 and parts[1] == "t" and parts[2].startswith("_Z"):
                mangled_of[key].add(parts[2])
        # ... and every subprogram of the debug info without DW_AT_external (inlined ones too).
        dump = subprocess.Popen(["llvm-dwarfdump", "--debug-info", obj], stdout=subprocess.PIPE,
                                text=True)
        tag, external, linkage = None, False, None
        for line in dump.stdout:
            if line.startswith("0x"):
                if tag == "DW_TAG_subprogram" and linkage and not external:
                    mangled_of[key].add(linkage)
                tag, external, linkage = line.split()[-1] if ":" in line else None, False, None
            elif "DW_AT_external" in line:
                external = True
            elif "DW_AT_linkage_name" in line:
                linkage = line.split('("', 1)[1].rsplit('")', 1)[0]
        if tag == "DW_TAG_subprogram" and linkage and not external:
            mangled_of[key].add(linkage)
        dump.wait()

names = sorted({n for s in mangled_of.values() for n in s})
demangled = dict(zip(names, subprocess.run(["c++filt"], input="\n".join(names),
                                           capture_output=True, text=True).stdout.splitlines()))

def split(sig):
    """'a::(anonymous namespace)::F<int>(int) const' -> ('a::(anonymous namespace)::F<int>', ...)"""
    sig = sig.replace("(anonymous namespace)", "@anon@")
    depth = 0
    for i, c in enumerate(sig):
        if c == "(" and depth == 0:
            return sig[:i].replace("@anon@", "(anonymous namespace)"), sig[i:]
        depth += {"<": 1, "(": 1, ">": -1, ")": -1}.get(c, 0)
    return sig.replace("@anon@", "(anonymous namespace)"), ""

def static_in_namespace(m):
    """True for '_ZN5ferry2io L 4Name...' (a `static` function of a namespace: 'L' before its name)."""
    if not m.startswith("_ZN"):
        return False
    i = 3
    while i < len(m) and m[i].isdigit():
        j = i
        while j < len(m) and m[j].isdigit():
            j += 1
        i = j + int(m[i:j])
        if i < len(m) and m[i] == "L":
            return True
    return False

found = collections.defaultdict(lambda: collections.defaultdict(set))  # target -> name -> (obj, sig)
for (target, obj), mangled in mangled_of.items():
    for m in mangled:
        name, params = split(demangled[m])
        # Lambdas and blocks live inside one function; std:: templates over a file's local types
        # are not the file's own functions.
        if re.search(r"lambda|\$_|__cxx_global|_GLOBAL__sub|::\{|<|^__|^decltype", name):
            continue
        if not (m.startswith("_ZL") or "_GLOBAL__N_" in m or static_in_namespace(m)):
            continue
        found[target][name].add((obj, params))

status = 0
for target in sorted(found):
    for name, defs in sorted(found[target].items()):
        objs = {o for o, _ in defs}
        if len(objs) < 2:
            continue
        status = 1
        print(f"{target}: {name}")
        for o, params in sorted(defs):
            print(f"    {o}: {params}")
sys.exit(status)
EOF

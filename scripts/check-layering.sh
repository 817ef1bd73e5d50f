#!/usr/bin/env bash
# Checks DESIGN.md's dependency direction: every quoted #include in a room must name a room that
# room may include. Angle-bracket includes are vendor/std headers and are checked separately for
# the public headers (std only). Exits non-zero and lists each violation.
set -euo pipefail
root=${1:-$(cd "$(dirname "$0")/.." && pwd)}
cd "$root"

# room -> allowed include prefixes (a quoted include "x/..." must start with one of them)
declare -A allowed=(
  [src/common]="ferry/ common/"
  [src/core]="ferry/ common/ core/"
  [src/registry]="ferry/ common/ core/ registry/"
  [src/rpc]="ferry/ common/ core/ rpc/"
  [src/metadata]="ferry/ common/ core/ metadata/"
  [src/metadata/p2p]="ferry/ common/ core/ metadata/ rpc/"
  [src/transport]="ferry/ common/ core/ transport/"
  [src/engine]="ferry/ common/ core/ registry/ metadata/ rpc/ transport/ engine/"
  [tools]="ferry/"
  [tools/metadata_server]="ferry/ common/ core/ metadata/ rpc/"
  [tools/ferry]="ferry/ common/ core/ metadata/ rpc/"
  [python]="ferry/"
  [examples]="ferry/ common/ core/ registry/"
  [bench]="ferry/ common/ core/ registry/ metadata/ rpc/ transport/ engine/ test_servers.h raw_baseline.h bench_main.h file_bench_flags.h"
)

status=0
while IFS= read -r -d '' file; do
  # The most specific room that contains the file.
  room=""
  for r in "${!allowed[@]}"; do
    if [[ "$file" == "$r/"* && ${#r} -gt ${#room} ]]; then room=$r; fi
  done
  [[ -n "$room" ]] || continue
  # A transport may include its own folder and transport.h-level files, never another transport.
  own=""
  if [[ "$file" =~ ^src/transport/([^/]+)/ ]]; then own="transport/${BASH_REMATCH[1]}/"; fi
  # A tool may include its own folder.
  tool_own=""
  if [[ "$file" =~ ^tools/([^/]+)/ ]]; then tool_own="${BASH_REMATCH[1]}/"; fi
  extra=""
  # Tests may also use the test-support library (real servers for tests).
  [[ "$file" == *_test.cc ]] && extra="test_servers.h"
  while IFS= read -r inc; do
    ok=0
    for prefix in ${allowed[$room]} $extra $tool_own; do
      [[ "$inc" == "$prefix"* ]] && ok=1
    done
    # The Python module's and the ferry command's sources may include headers of their own
    # folder by bare name ("py_engine.h", "text_table.h": "ferry/..." names the public API).
    [[ ( "$room" == python || "$room" == tools/ferry ) && "$inc" != */* &&
       -f "$(dirname "$file")/$inc" ]] && ok=1
    # Shared by transports, not transports themselves: the conformance suite and its test
    # context, and samehost/ (the same-host access-grant channel of shm and cxl).
    if [[ "$room" == src/transport && "$inc" == transport/*/* && "$inc" != "$own"* &&
          "$inc" != transport/conformance/* && "$inc" != transport/samehost/* ]]; then
      ok=0
    fi
    if [[ $ok -eq 0 ]]; then
      echo "layering: $file includes \"$inc\", which $room may not include"
      status=1
    fi
  done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$file")
done < <(find src tools python examples bench -type f \( -name '*.h' -o -name '*.cc' \) -print0 2>/dev/null)

# Public headers: std headers and other ferry/ headers only.
while IFS= read -r -d '' file; do
  while IFS= read -r inc; do
    if [[ "$inc" != ferry/* ]]; then
      echo "layering: public header $file includes \"$inc\" (public headers include only ferry/ and std)"
      status=1
    fi
  done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*"\([^"]*\)".*/\1/p' "$file")
  while IFS= read -r inc; do
    if [[ "$inc" == *.h* || "$inc" == */* ]]; then
      echo "layering: public header $file includes <$inc>, which is not a std header"
      status=1
    fi
  done < <(sed -n 's/^[[:space:]]*#[[:space:]]*include[[:space:]]*<\([^>]*\)>.*/\1/p' "$file")
done < <(find include -type f -name '*.h' -print0)

[[ $status -eq 0 ]] && echo "layering: ok"
exit $status

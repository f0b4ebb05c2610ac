#!/usr/bin/env bash
# What a device call would send: the working tree as the device copies it (tracked files that
# exist, untracked files git does not ignore) plus the ignored paths the call carries, against
# the 64 MiB a call may send. Run it from the repository root before a call:
#   bash scripts/gpu/transfer_size.sh .devsite .whl
# It prints the total and the largest parts, and exits 1 where the call would not fit (a call
# past the limit sends nothing and costs its start).
set -euo pipefail
limit=$((64 * 1024 * 1024))
for carried in "$@"; do
  [ -e "$carried" ] || { echo "transfer_size: no $carried to carry" >&2; exit 2; }
done
sizes=$(mktemp); trap 'rm -f "$sizes"' EXIT
{ git ls-files -z; git ls-files -z --others --exclude-standard; } \
  | xargs -0 -r stat --format '%s %n' 2>/dev/null > "$sizes" || true
for carried in "$@"; do
  find "$carried" -type f -printf '%s %p\n' >> "$sizes"
done
total=$(awk '{ s += $1 } END { print s + 0 }' "$sizes")
echo "largest parts (MB):"
awk '{ n = split($2, p, "/"); top = (n > 2 ? p[1] "/" p[2] : $2); s[top] += $1 }
     END { for (k in s) printf "%8.1f  %s\n", s[k] / 1e6, k }' "$sizes" | sort -rn | awk 'NR <= 8'
printf 'total %.1f MB of %.1f MB (64 MiB)\n' "$(echo "$total / 1000000" | bc -l)" "$(echo "$limit / 1000000" | bc -l)"
if [ "$total" -gt "$limit" ]; then
  echo "transfer_size: $((total - limit)) bytes over: leave out docs/bench or fixture weights the call does not use" >&2
  exit 1
fi

# The checking scripts' report: sourced by check-real-host.sh and
# check-real-host-containers.sh, which set $report (the report file) and
# fail=0 first.

# say TEXT…: print TEXT and append it to the report.
say() { printf '%s\n' "$*" | tee -a "$report"; }

# check WHAT WANT GOT: "ok" when GOT is WANT, else "MISMATCH" and fail=1;
# $want_label and $got_label name the two sides (default: want, got).
check() {
	if [ "$2" = "$3" ]; then
		say "ok        $1: $3"
	else
		say "MISMATCH  $1: ${want_label:-want} '$2', ${got_label:-got} '$3'"
		fail=1
	fi
}

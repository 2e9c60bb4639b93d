# shellcheck shell=bash
# scripts/heartbeat.sh — long steps say where they are (issue 28): sourced by
# scripts/lib.sh and images/lib.sh. Sourcing it defines one function and
# changes nothing else, so the image scripts' cache keys are not concerned.

# vhca_step NAME EXPECTED LOG CMD... — run CMD; say first what the step is and
# how long it usually takes, then every $VHCA_HEARTBEAT seconds (default 20)
# while it runs, one line on stderr: the time so far and LOG's last line,
# which is the step's own progress (debootstrap's "I: Retrieving ...", apt's
# "Unpacking ...", ninja's "[n/m] ...", make's "CC ..."). CMD's output goes to
# LOG, or, with LOG "-", to stderr as it comes (cargo's own "Compiling ..."
# lines; the heartbeat then covers the silent stretches, such as a fat-LTO
# link). Returns CMD's status. The heartbeat stops with CMD, and by itself if
# the calling shell is gone.
vhca_step() {
    local name=$1 expected=$2 log=$3 hb rc=0 me=${0##*/}
    shift 3
    printf '[%s] %s: started (usually %s%s)\n' "$me" "$name" "$expected" \
        "$([ "$log" = - ] || echo "; log $log")" >&2
    local t0; t0=$(date +%s)
    (
        while sleep "${VHCA_HEARTBEAT:-20}" && kill -0 "$$" 2>/dev/null; do
            last=''
            if [ "$log" != - ]; then
                last=$(tail -c 4000 "$log" 2>/dev/null | tr '\r' '\n' | grep -v '^[[:space:]]*$' |
                    tail -1 | cut -c1-110)
            fi
            s=$(($(date +%s) - t0))
            printf '[%s] %s: %dm%02ds so far (usually %s)%s\n' "$me" "$name" $((s / 60)) $((s % 60)) \
                "$expected" "${last:+; last: $last}" >&2
        done
    ) >/dev/null &
    hb=$!
    if [ "$log" = - ]; then
        "$@" >&2 || rc=$?
    else
        "$@" >"$log" 2>&1 || rc=$?
    fi
    kill "$hb" 2>/dev/null || true
    wait "$hb" 2>/dev/null || true
    local s=$(($(date +%s) - t0))
    printf '[%s] %s: %s after %dm%02ds\n' "$me" "$name" "$([ $rc = 0 ] && echo done || echo "FAILED ($rc)")" \
        $((s / 60)) $((s % 60)) >&2
    return "$rc"
}

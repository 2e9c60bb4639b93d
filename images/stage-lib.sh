# images/stage-lib.sh — helpers that stage files of the host tool root into a
# guest tree, sourced inside the root by guest.sh's build step and by
# workloads.sh. The caller sets S, the stage folder (the guest's /).

# add PATH: copy a file (resolved) into the stage, plus a symlink at its own
# (canonical) name if that differs.
add() {
    local f=$1 r c
    r=$(readlink -f "$f") || return 1
    [ -e "$r" ] || { echo "missing $f" >&2; return 1; }
    c=$(readlink -f "$(dirname "$f")")/$(basename "$f")
    if [ ! -e "$S$r" ]; then
        mkdir -p "$S$(dirname "$r")"
        cp -a "$r" "$S$r"
    fi
    if [ "$c" != "$r" ] && [ ! -e "$S$c" ] && [ ! -L "$S$c" ]; then
        mkdir -p "$S$(dirname "$c")"
        ln -s "$r" "$S$c"
    fi
}
is_elf() { [ "$(head -c4 "$1" 2>/dev/null | od -An -c | tr -d ' ')" = '177ELF' ]; }
# add_closure PATH: the libraries PATH needs (its ldd closure), not PATH
# itself: for a binary already placed in the stage, or one from outside the
# root's tree.
add_closure() {
    local l
    for l in $(ldd "$1" 2>/dev/null | awk '$2 == "=>" && $3 ~ /^\// {print $3} $1 ~ /^\// {print $1}'); do
        add "$l"
    done
}
# add_elf PATH: the file and its ldd closure.
add_elf() {
    add "$1"
    add_closure "$1"
}

# Sourced by the image builds (engine_images/vllm-cpu/build.sh, images/wharf/build.sh):
# the Debian mirror this machine's own apt uses, the one that is reachable.
debian_mirror() {
    local f=/etc/apt/sources.list.d/debian.sources
    if [[ -f $f ]]; then
        awk '$1 == "URIs:" && $2 !~ /security/ { print $2; exit }' "$f"
    elif [[ -f /etc/apt/sources.list ]]; then
        awk '$1 == "deb" && !/security/ { for (i = 2; i <= NF; i++) if ($i ~ /^[a-z]+:\/\//) { print $i; exit } }' \
            /etc/apt/sources.list
    fi
}

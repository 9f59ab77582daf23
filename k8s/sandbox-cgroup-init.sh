#!/bin/sh
# Runs before `ray start` on a sandbox pod (the sandbox group's container command; KubeRay runs
# it, then `ray start`, in one `bash -lc`). Installed in the image as spade-sandbox-cgroup-init.
#
# Why: the local sandbox backend (spade_ray/execution/cgroups.py) makes a cgroup per sandbox
# worker with the memory, pids and cpu controllers. On cgroup v2 a container sees its own cgroup
# as the root (cgroup namespace), and that cgroup holds the container's processes; v2 refuses to
# enable controllers for the children of a cgroup that holds processes ("no internal
# processes"). So every process moves into a leaf, /sys/fs/cgroup/ray, first; Ray and the sandbox
# actors it starts inherit it. The pod must be privileged (a writable cgroupfs), which the
# manifests confine to a Kata VM. On cgroup v1 nothing needs moving.
set -eu
root=/sys/fs/cgroup
[ -f "$root/cgroup.controllers" ] || exit 0  # cgroup v1: the backend writes per controller
if ! mkdir -p "$root/ray" 2>/dev/null; then
    echo "spade-sandbox-cgroup-init: $root is read-only: the sandbox pod must be privileged" \
         "(see k8s/rayjob.yaml); without cgroups every sandbox result would say 'degraded'" >&2
    exit 1
fi
pids=$(cat "$root/cgroup.procs")
for pid in $pids; do
    echo "$pid" > "$root/ray/cgroup.procs" 2>/dev/null || true  # a process may have exited
done
if [ -n "$(cat "$root/cgroup.procs")" ]; then
    echo "spade-sandbox-cgroup-init: processes left in $root: $(cat "$root/cgroup.procs")" >&2
    exit 1
fi

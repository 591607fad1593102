#!/usr/bin/env bash
# Install podman (with runc) and mmdebstrap from Debian's packages and configure podman for this kind of machine,
# where crun fails (root lacks CAP_SYS_RESOURCE; hybrid cgroups): runc, cgroupfs, and default ulimits below the
# hard limits (otherwise the runtime cannot set them). Needs root; safe to run again.
set -euo pipefail
missing=()
for tool in podman runc mmdebstrap; do command -v "$tool" >/dev/null || missing+=("$tool"); done
if [ ${#missing[@]} -gt 0 ]; then
  apt-get update -qq
  DEBIAN_FRONTEND=noninteractive apt-get install -y -qq podman runc mmdebstrap >/dev/null
fi
mkdir -p /etc/containers/containers.conf.d
at_most_4096() { if [ "$1" = unlimited ] || [ "$1" -gt 4096 ]; then echo 4096; else echo "$1"; fi; }
files=$(at_most_4096 "$(ulimit -Hn)"); procs=$(at_most_4096 "$(ulimit -Hu)")
cat > /etc/containers/containers.conf.d/50-composer.conf <<CONF
# Written by composer's scripts/install-podman.sh.
[containers]
default_ulimits = ["nofile=$files:$files", "nproc=$procs:$procs"]
[engine]
runtime = "runc"
cgroup_manager = "cgroupfs"
events_logger = "file"
CONF
podman info --format 'podman {{.Version.Version}}: runtime {{.Host.OCIRuntime.Name}}, cgroups {{.Host.CgroupsVersion}}'

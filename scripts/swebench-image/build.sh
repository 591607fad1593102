#!/usr/bin/env bash
# Build a local SWE-bench instance image, laid out like the official one and tagged with its official name:
#
#     scripts/swebench-image/build.sh marshmallow-code__marshmallow-1343     # ~1 min; needs mmdebstrap and podman
#
# Layout (what the swebench harness's eval script expects): the repository at /testbed, a git repo whose commit
# has the base commit's tree, reachable under the base commit's id through a replace ref (git checkout <base> --
# <tests>, as the eval script does, works); the test environment at /opt/miniconda3/envs/testbed, activated by
# `source /opt/miniconda3/bin/activate; conda activate testbed` (a venv and a small `conda` shell function, not
# conda itself); the package installed editable with its '.[dev]' extra from pinned wheels in /opt/wheels, which
# pip in the image uses offline (/etc/pip.conf), so the eval script's own `pip install -e '.[dev]'` runs with
# --network none. Inputs per instance live in scripts/swebench-image/<instance_id>/.
# COMPOSER_CONTAINER_ENGINE picks the engine (podman by default; docker works the same).
set -euo pipefail
iid=${1:?usage: build.sh INSTANCE_ID}
here=$(cd "$(dirname "$0")" && pwd)
spec=$here/$iid
[ -d "$spec" ] || { echo "build.sh: no build inputs for $iid in $here (have: $(ls -d "$here"/*/ | xargs -n1 basename | tr '\n' ' '))" >&2; exit 2; }
# shellcheck source=/dev/null
source "$spec/instance.env"
engine=${COMPOSER_CONTAINER_ENGINE:-podman}
tag="swebench/sweb.eval.x86_64.${iid//__/_1776_}:latest"
tag=${tag,,}
for tool in mmdebstrap "$engine"; do
  command -v "$tool" >/dev/null || { echo "build.sh: $tool is not installed (Debian: apt-get install mmdebstrap podman runc)" >&2; exit 2; }
done
work=$(mktemp -d); chmod 755 "$work"  # read by mmdebstrap's unshared root (a subuid) when not run as root
trap 'rm -rf "$work"' EXIT
pip=(python3 -m pip download -q --no-deps --require-hashes)
"${pip[@]}" --only-binary=:all: --python-version 3.9 --implementation cp --abi cp39 --abi abi3 --abi none \
  --platform manylinux_2_28_x86_64 --platform manylinux2014_x86_64 --platform any -d "$work/wheels" -r "$spec/requirements.txt"
"${pip[@]}" --no-binary=:all: -d "$work/sdist" -r "$spec/source.txt"
export BASE_COMMIT SDIST_TAR=$work/sdist/$SDIST.tar.gz SDIST
mmdebstrap --quiet --variant=minbase --include=python3,python3-venv,git,patch,ca-certificates \
  --customize-hook="copy-in $work/wheels /opt" --customize-hook="$here/setup-rootfs.sh \"\$1\"" \
  "$SUITE" "$work/rootfs.tar" http://deb.debian.org/debian
"$engine" import --quiet --change 'WORKDIR /testbed' --change 'CMD ["/bin/bash"]' "$work/rootfs.tar" "$tag" >/dev/null
echo "built $tag"

#!/usr/bin/env bash
# mmdebstrap customize hook of build.sh: $1 is the root file system; BASE_COMMIT, SDIST, SDIST_TAR come from build.sh.
set -euo pipefail
root=$1
chmod 755 "$root"  # as in the official images (mmdebstrap leaves it 555)
cat > "$root/etc/pip.conf" <<'CONF'
[global]
no-index = true
find-links = /opt/wheels
disable-pip-version-check = true
CONF
chroot "$root" python3 -m venv /opt/miniconda3/envs/testbed
mkdir -p "$root/opt/miniconda3/bin"
cat > "$root/opt/miniconda3/bin/activate" <<'SH'
# Not conda: the two calls SWE-bench's eval scripts make (`conda activate testbed`, `conda deactivate`) over a venv.
conda() {
  case "$1" in
    activate) . "/opt/miniconda3/envs/${2:-testbed}/bin/activate" ;;
    deactivate) deactivate ;;
    *) echo "conda shim: only 'activate ENV' and 'deactivate'" >&2; return 1 ;;
  esac
}
SH
mkdir -p "$root/testbed"
tar -xzf "$SDIST_TAR" -C "$root/testbed" --strip-components=1 --no-same-owner
# What the sdist adds to the git tree: package metadata and setup.cfg's egg_info section.
rm -rf "$root/testbed/PKG-INFO" "$root"/testbed/src/*.egg-info
python3 - "$root/testbed/setup.cfg" <<'PY'
import re, sys
path = sys.argv[1]
text = open(path).read()
open(path, "w").write(re.sub(r"\n\[egg_info\]\n(?:[^\[\n][^\n]*\n?)*", "\n", text).rstrip("\n") + "\n")
PY
# HOME: the image's root's, whoever builds it (a non-root build's own HOME does not exist in the rootfs)
chroot "$root" env HOME=/root sh -ec '
  cd /testbed
  git init -q
  git -c user.name=composer -c user.email=composer@localhost add -A
  GIT_AUTHOR_DATE=2019-08-13T00:00:00Z GIT_COMMITTER_DATE=2019-08-13T00:00:00Z \
    git -c user.name=composer -c user.email=composer@localhost commit -q -m "'"$SDIST"' sdist, the tree of '"$BASE_COMMIT"'"
  git replace -f '"$BASE_COMMIT"' HEAD
  git config --global --add safe.directory /testbed
  . /opt/miniconda3/envs/testbed/bin/activate
  python -m pip install -q -e ".[dev]"
'

# scripts/setup.sh — sourced by scripts/test and scripts/demo: installs what is missing
# (Debian 12 packages), puts nvcc on PATH and configures the release build in ./build.
set -euo pipefail
ROOT="$(cd "$(dirname "${BASH_SOURCE[0]}")/.." && pwd)"
cd "$ROOT"

MLA_PACKAGES="meson ninja-build pkg-config g++ libeigen3-dev libsimdjson-dev libboost-test-dev libopenblas-dev libdnnl-dev libpcre2-dev xz-utils libopenmpi-dev openmpi-bin"
missing=()
for p in $MLA_PACKAGES; do
  dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed" || missing+=("$p")
done
if [ ${#missing[@]} -gt 0 ]; then
  echo "setup: installing ${missing[*]}"
  SUDO=""; [ "$(id -u)" -ne 0 ] && SUDO="sudo"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q >/dev/null
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}" >/dev/null
fi

# Meson finds nvcc only on PATH (it reads no CUDA environment variable).
if [ -x /usr/local/cuda/bin/nvcc ]; then
  export PATH="/usr/local/cuda/bin:$PATH"
  MLA_CUDA=enabled   # a broken .cu must fail the build, not silently drop the backend
else
  MLA_CUDA=disabled
fi
export MLA_CUDA
export OPENBLAS_NUM_THREADS="${OPENBLAS_NUM_THREADS:-$(nproc)}"

mla_configure() {  # mla_configure DIR [meson options...]
  local dir="$1"; shift
  if [ -f "$dir/build.ninja" ]; then
    meson setup --reconfigure "$dir" "$@" >/dev/null
  else
    meson setup "$dir" "$@" >/dev/null
  fi
}

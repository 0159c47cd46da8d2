# Sourced by build.sh, sanitize.sh and fuzz.sh: when ccache is installed, compile through it, with
# paths taken relative to the repository so that another clone of it (CI's fresh clone) reuses the
# cache. Without ccache nothing changes. Sets the array KVEVICT_LAUNCHER (CMake configure arguments).
KVEVICT_LAUNCHER=()
if command -v ccache > /dev/null 2>&1 && [[ "${KVEVICT_NO_CCACHE:-0}" != 1 ]]; then
  export CCACHE_BASEDIR="${CCACHE_BASEDIR:-$(pwd)}"
  # The -g builds (sanitizer, fuzzers) would otherwise key every object on the build folder's path.
  export CCACHE_NOHASHDIR="${CCACHE_NOHASHDIR:-1}"
  KVEVICT_LAUNCHER=(-DCMAKE_C_COMPILER_LAUNCHER=ccache -DCMAKE_CXX_COMPILER_LAUNCHER=ccache
                    -DCMAKE_CUDA_COMPILER_LAUNCHER=ccache)
fi

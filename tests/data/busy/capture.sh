#!/usr/bin/env bash
# How the captures in this folder were made on a real NVIDIA H200 host (see SOURCES.md):
# every /dev/nvidia* and /dev/kfd holder, and nvidia-smi's compute-apps query, idle and while
# a small CUDA program holds 1 GiB of device memory. Writes into $1.
set -u
out=${1:?output directory}
mkdir -p "$out"
holders() {
    for fd in /proc/[0-9]*/fd/*; do
        target=$(readlink "$fd" 2>/dev/null) || continue
        case "$target" in
            /dev/nvidia*|/dev/kfd)
                pid=${fd#/proc/}; pid=${pid%%/*}
                printf '%s\t%s\t%s\t%s\n' "$pid" "$(cat /proc/"$pid"/comm 2>/dev/null)" \
                    "$(stat -c %U /proc/"$pid" 2>/dev/null)" "$target" ;;
        esac
    done | sort -u
}
query() {
    nvidia-smi --query-compute-apps=pid,process_name,used_gpu_memory,gpu_uuid --format=csv > "$out/$1-apps.csv" 2>&1
    nvidia-smi --query-compute-apps=pid,process_name,used_gpu_memory --format=csv,noheader,nounits > "$out/$1-apps-noheader-nounits.csv" 2>&1
    nvidia-smi --query-compute-apps=pid,process_name,used_gpu_memory,gpu_uuid --format=csv,noheader > "$out/$1-apps-noheader.csv" 2>&1
    holders > "$out/$1-proc-holders.tsv"
}
ls -l /dev/nvidia* /dev/kfd > "$out/dev-nodes.txt" 2>&1
query idle
cat > /tmp/hold.cu <<'CU'
#include <cuda_runtime.h>
#include <unistd.h>
int main() { void *p; if (cudaMalloc(&p, 1u << 30) != cudaSuccess) return 1; cudaMemset(p, 0, 1u << 30);
             cudaDeviceSynchronize(); sleep(25); return 0; }
CU
/usr/local/cuda/bin/nvcc -o /tmp/gpu-holder /tmp/hold.cu > "$out/nvcc.log" 2>&1 || exit 1
/tmp/gpu-holder & holder=$!
sleep 6
query busy
wait "$holder"

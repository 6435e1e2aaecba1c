#!/bin/bash
# bench/compress/profile-kernels.sh — per-kernel GPU time (ncu gpu__time_duration) of the first
# COUNT kernels of one compressor's first encode, or with "kernels" of the bare kern_topk: where an
# encode's time goes. Needs ncu on the GPU host.
#   bench/compress/profile-kernels.sh BUILD_DIR N DENSITY COMPRESSOR|kernels [COUNT]
b=$1 n=$2 d=$3 c=$4 cnt=${5:-30}
if [ "$c" = kernels ]; then args=(-c none); else args=(-c "$c" -k 0); fi
echo "# $c n=$n density=$d: first $cnt kernels"
ncu --metrics gpu__time_duration.sum --launch-count "$cnt" --csv "$b/bench/compress/bench-compress" \
  -n "$n" -d "$d" -i 20 "${args[@]}" 2>/dev/null | grep gpu__time |
  awk -F'","' '{name=$5; sub(/\(.*/,"",name); v=$NF; gsub(/[",]/,"",v); t+=v/1000;
                printf "%-22s %9.1f us\n", name, v/1000} END {printf "%-22s %9.1f us\n", "total", t}'

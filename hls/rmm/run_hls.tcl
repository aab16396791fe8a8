# Vitis HLS: C-simulation, synthesis and export of the replay-management module as a Vitis
# kernel (an .xo for v++). Not runnable on the development machine (no Vitis there); run it
# where Vitis HLS 2023.2 or later is installed, from the repository root:
#   vitis_hls -f hls/rmm/run_hls.tcl
# Configuration (environment, defaults in brackets): RMM_K [16], RMM_CAPACITY [4194304],
# RMM_FRAC_BITS [20: BoardTree's frac_bits], RMM_PART [xcu250-figd2104-2L-e: Alveo U250],
# RMM_CLOCK_NS [3.33: 300 MHz]. The kernel reports RMM_K, RMM_CAPACITY and RMM_FRAC_BITS through
# the protocol's info op (rmm.h: kInfo); drlhet.backends.fpga_board.BoardTree refuses a
# bitstream whose values are not the ones it is given.
proc env_or {name fallback} {
  if {[info exists ::env($name)]} { return $::env($name) }
  return $fallback
}
set k [env_or RMM_K 16]
set capacity [env_or RMM_CAPACITY 4194304]
set frac_bits [env_or RMM_FRAC_BITS 20]
set part [env_or RMM_PART xcu250-figd2104-2L-e]
set clock [env_or RMM_CLOCK_NS 3.33]
set here [file dirname [file normalize [info script]]]
set defs "-std=c++17 -I$here -DRMM_K=$k -DRMM_CAPACITY=$capacity -DRMM_FRAC_BITS=$frac_bits"

open_project -reset rmm_k${k}
set_top rmm_top
add_files $here/rmm_top.cpp -cflags $defs
add_files -tb $here/rmm_tb.cpp -cflags "$defs -DRMM_TB_INCLUDES_TOP=0"
open_solution -reset u250 -flow_target vitis
set_part $part
create_clock -period $clock -name default
config_interface -m_axi_alignment_byte_size 64 -m_axi_max_widen_bitwidth 512
csim_design -argv "200 1"
csynth_design
export_design -format xo -output rmm_k${k}.xo
exit

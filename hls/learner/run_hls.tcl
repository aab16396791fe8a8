# Vitis HLS: C-simulation, synthesis and export of the learner module as a Vitis kernel (an
# .xo for v++). Not runnable on the development machine (no Vitis there); run it where Vitis
# HLS 2023.2 or later is installed, from the repository root:
#   vitis_hls -f hls/learner/run_hls.tcl
# Configuration (environment, defaults in brackets): LEARNER_ALGO [0: DQN; 1: DDPG/TD3],
# LEARNER_OBS [4], LEARNER_ACTIONS [2], LEARNER_H0/H1/H2 [64/64/0], LEARNER_DUELING [1],
# LEARNER_CRITICS [1; 2 for TD3], LEARNER_SIZED_TILES [1: tiles as wide as the network's widest
# layer, rounded up to 64], LEARNER_PART [xcu250-figd2104-2L-e: Alveo U250],
# LEARNER_CLOCK_NS [3.33: 300 MHz, the clock the cycle model assumes].
proc env_or {name fallback} {
  if {[info exists ::env($name)]} { return $::env($name) }
  return $fallback
}
set defs "-std=c++17"
foreach {name fallback} {LEARNER_ALGO 0 LEARNER_OBS 4 LEARNER_ACTIONS 2 LEARNER_H0 64
                         LEARNER_H1 64 LEARNER_H2 0 LEARNER_DUELING 1 LEARNER_CRITICS 1
                         LEARNER_SIZED_TILES 1} {
  append defs " -D$name=[env_or $name $fallback]"
}
set part [env_or LEARNER_PART xcu250-figd2104-2L-e]
set clock [env_or LEARNER_CLOCK_NS 3.33]
set here [file dirname [file normalize [info script]]]
append defs " -I$here"

open_project -reset learner
set_top learner_top
add_files $here/learner_top.cpp -cflags $defs
add_files -tb $here/learner_tb.cpp -cflags "$defs -DLEARNER_TB_INCLUDES_TOP=0"
open_solution -reset u250 -flow_target vitis
set_part $part
create_clock -period $clock -name default
config_interface -m_axi_alignment_byte_size 64 -m_axi_max_widen_bitwidth 512
csim_design -argv "--top 3 1"
csynth_design
export_design -format xo -output learner.xo
exit

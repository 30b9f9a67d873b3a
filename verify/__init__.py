"""The verification harness, where the simulator (``sim``) and the RTL (``rtl``) meet:
co-simulation of a Program on the Verilog chip (``cosim``), the random-program fuzzer (``fuzz``)
and the co-simulation speed benchmark (``cosim_bench``)."""

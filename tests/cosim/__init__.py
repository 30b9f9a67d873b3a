"""The chip's Verilog under cocotb against the simulator (marked ``cosim``)."""

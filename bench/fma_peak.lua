-- The FP32 FMA peak of one thread, measured for a second: `fma_peak_gflops=<x>` (bench/op_rows.lua's MLP step row
-- runs it pinned to the cpu its step runs on).
--   ./build/bin/ddplua bench/fma_peak.lua
local core = require("ddplua").core
print(string.format("fma_peak_gflops=%.1f", core._fma_peak(1, 1.0)))

-- The table of bench/op_survey.lua and bench/module_survey.lua: rows first..last of `cases` ({name, ddplua,
-- PyTorch}), PyTorch's side run first in one Python process on one thread (OPENBLAS_NUM_THREADS=1 as well) (its set-up lines, then per row the lines py_row gives,
-- each printing "i median_ms"), then ddplua's side timed by bench/median_ms.lua (fn_of(case): the function timed),
-- one line a row with both figures and the speed-up, after the CPU's line.
--
--   dofile("bench/survey_table.lua")(ddp, {cfg = cfg (runs, first, last), cases = ..., py_setup = {lines},
--     py_row = function(i, case) return {lines} end, fn_of = function(case) return fn end, title = "...", width = n})
local here = (arg and arg[0] or "bench/x.lua"):gsub("[^/]*$", "")
local median_of = dofile(here .. "median_ms.lua")

return function(ddp, o)
  local cfg, cases = o.cfg, {}
  for i = cfg.first, math.min(cfg.last, #o.cases) do cases[#cases + 1] = o.cases[i] end
  local py = { "import time, torch", "torch.set_num_threads(1)", "torch.manual_seed(0)" }
  for _, line in ipairs(o.py_setup) do py[#py + 1] = line end
  for _, line in ipairs({ "def med(f):", "    for _ in range(3): f()", "    t = []",
    "    for _ in range(" .. cfg.runs .. "):",
    "        t0 = time.perf_counter(); f(); t.append((time.perf_counter() - t0) * 1e3)",
    "    t.sort(); return t[(len(t) - 1) // 2]" }) do
    py[#py + 1] = line
  end
  for i, c in ipairs(cases) do
    for _, line in ipairs(o.py_row(i, c)) do py[#py + 1] = line end
  end
  local path = os.tmpname()
  local f = assert(io.open(path, "w"))
  f:write(table.concat(py, "\n"), "\n")
  f:close()
  -- one thread on PyTorch's side too: torch.set_num_threads(1) leaves OpenBLAS's own threads (its GEMMs ran on both
  -- cores here, 172 against 93 GFLOP/s, until this)
  local pipe = assert(io.popen("OPENBLAS_NUM_THREADS=1 OMP_NUM_THREADS=1 /usr/bin/python3 " .. path .. " 2>&1"))
  local out = pipe:read("a")
  pipe:close()
  os.remove(path)
  local theirs = {}
  for i, v in out:gmatch("(%d+) ([%d.e+-]+)") do theirs[tonumber(i)] = tonumber(v) end

  local row = "%-" .. o.width .. "s %10s %10s %8s"
  print("cpu: " .. ddp.core.cpu_info())
  print(string.format(row, o.title, "ddplua ms", "torch ms", "speed"))
  for i, c in ipairs(cases) do
    local ms = median_of(ddp, cfg.runs, o.fn_of(c))
    local t = theirs[i]
    print(string.format(row, c[1], string.format("%.3f", ms), t and string.format("%.3f", t) or "-",
      t and string.format("%.2fx", t / ms) or "-"))
  end
  if not next(theirs) then print("PyTorch side failed:\n" .. out) end
end

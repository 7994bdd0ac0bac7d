-- ddplua plot RUN_DIR [--out FILE]
--
-- Draws the loss and accuracy curves of a run from RUN_DIR/metrics.jsonl
-- into RUN_DIR/curves.png with gnuplot: per step and per epoch, one line per
-- key (keys containing "loss" go to the loss panels, keys containing "acc"
-- to the accuracy panels). The gnuplot script is kept as RUN_DIR/curves.gp
-- (the data inline), to restyle a figure by hand. When a step or epoch was
-- logged twice (a run resumed from a checkpoint) the later record counts.
--
-- Also usable from Lua: require("ddplua.tools.plot").plot(run_dir [, {out=}]).
local core = require "ddplua.core"

local M = {}

local function shell_quote(s) return "'" .. s:gsub("'", "'\\''") .. "'" end

--- Reads metrics.jsonl: step records and epoch records, in file order.
function M.read_metrics(path)
  local f, err = io.open(path, "rb")
  if not f then error("plot: cannot read " .. path .. ": " .. tostring(err), 0) end
  local text = f:read("a")
  f:close()
  local steps, epochs = {}, {}
  local lineno = 0
  for line, nl in text:gmatch("([^\n]*)(\n?)") do
    if line == "" and nl == "" then break end
    lineno = lineno + 1
    if line:match("%S") then
      local ok, rec = pcall(core.json_decode, line, path .. ":" .. lineno)
      if not ok then
        -- a run killed mid-write leaves its last line unterminated: skip it
        if nl == "" then break end
        error("plot: " .. tostring(rec):gsub("^[^\n]-plot%.lua:%d+: ", ""), 0)
      end
      if type(rec) == "table" then
        if rec.kind == "epoch" then epochs[#epochs + 1] = rec
        elseif rec.kind == "step" then steps[#steps + 1] = rec end
      end
    end
  end
  return steps, epochs
end

local function category(key)
  local k = key:lower()
  if k:find("loss", 1, true) then return "loss" end
  if k:find("acc", 1, true) then return "accuracy" end
  return nil
end

-- {key -> sorted {{x, y}, ...}} for one category, the last record winning per x.
local function series(records, xkey, cat)
  local by_key = {}
  for _, r in ipairs(records) do
    local x = r[xkey]
    if type(x) == "number" then
      for k, v in pairs(r) do
        local counter = k == xkey or k == "step" or k == "epoch" or k == "time"
        if type(v) == "number" and not counter and category(k) == cat then
          by_key[k] = by_key[k] or {}
          by_key[k][x] = v
        end
      end
    end
  end
  local out, keys = {}, {}
  for k, points in pairs(by_key) do
    local xs = {}
    for x in pairs(points) do xs[#xs + 1] = x end
    table.sort(xs)
    local list = {}
    for _, x in ipairs(xs) do list[#list + 1] = { x, points[x] } end
    out[k] = list
    keys[#keys + 1] = k
  end
  table.sort(keys)
  return out, keys
end

local function gnuplot_available()
  local ok = os.execute("command -v gnuplot >/dev/null 2>&1")
  return ok == true
end

local function png_terminal()
  local p = io.popen("gnuplot -e 'set terminal pngcairo' 2>&1")
  local out = p:read("a")
  p:close()
  if out:match("%S") then return "png" end
  return "pngcairo"
end

local function number(v)
  return (core.json_encode(v + 0.0):gsub("^Infinity$", "inf"):gsub("^%-Infinity$", "-inf"):gsub("^NaN$", "nan"))
end

--- Writes <run_dir>/curves.png (or opts.out) and returns its path.
function M.plot(run_dir, opts)
  opts = opts or {}
  if type(run_dir) ~= "string" or run_dir == "" then error("plot: expected a run directory", 2) end
  if core.file_type(run_dir) ~= "directory" then error("plot: " .. run_dir .. " is not a directory", 0) end
  local metrics = run_dir .. "/metrics.jsonl"
  if core.file_type(metrics) ~= "file" then
    error("plot: " .. metrics .. " does not exist (is this a run directory?)", 0)
  end
  if not gnuplot_available() then
    error("plot: gnuplot was not found on PATH; install it (Debian: apt-get install gnuplot-nox)", 0)
  end
  local steps, epochs = M.read_metrics(metrics)
  local panels = {}
  for _, spec in ipairs { { steps, "step", "loss" }, { steps, "step", "accuracy" }, { epochs, "epoch", "loss" },
    { epochs, "epoch", "accuracy" } } do
    local data, keys = series(spec[1], spec[2], spec[3])
    if #keys > 0 then panels[#panels + 1] = { x = spec[2], cat = spec[3], data = data, keys = keys } end
  end
  if #panels == 0 then
    error("plot: " .. metrics .. " has no loss or accuracy values (keys containing \"loss\" or \"acc\")", 0)
  end
  local out = opts.out or (run_dir .. "/curves.png")
  local cols = #panels == 1 and 1 or 2
  local rows = (#panels + cols - 1) // cols
  local gp = {}
  local function add(...) gp[#gp + 1] = string.format(...) end
  for i, p in ipairs(panels) do
    for j, k in ipairs(p.keys) do
      add("$d%d_%d << EOD", i, j)
      for _, pt in ipairs(p.data[k]) do add("%s %s", number(pt[1]), number(pt[2])) end
      add("EOD")
    end
  end
  add("set terminal %s size %d,%d noenhanced", png_terminal(), 640 * cols, 420 * rows)
  add("set output %s", core.json_encode(out))
  add("set multiplot layout %d,%d title %s", rows, cols, core.json_encode(run_dir))
  add("set grid")
  for i, p in ipairs(panels) do
    add("set title %s", core.json_encode(p.cat .. " per " .. p.x))
    add("set xlabel %s", core.json_encode(p.x))
    add("set ylabel %s", core.json_encode(p.cat))
    -- losses fall and accuracies rise: the legend goes where the curves are not
    add(p.cat == "loss" and "set key top right" or "set key bottom right")
    local span = 0
    for _, k in ipairs(p.keys) do span = math.max(span, p.data[k][#p.data[k]][1] - p.data[k][1][1]) end
    -- whole epochs on the axis rather than 1.5, 2.5, ...
    if p.x == "epoch" and span <= 20 then add("set xtics 1") else add("set xtics autofreq") end
    local parts = {}
    local style = p.x == "epoch" and "linespoints pt 7 ps 0.6" or "lines"
    for j, k in ipairs(p.keys) do
      parts[#parts + 1] = string.format("$d%d_%d using 1:2 with %s lw 2 title %s", i, j, style, core.json_encode(k))
    end
    add("plot %s", table.concat(parts, ", \\\n     "))
  end
  add("unset multiplot")
  add("set output")
  local script = run_dir .. "/curves.gp"
  local f = assert(io.open(script, "wb"))
  f:write(table.concat(gp, "\n"), "\n")
  f:close()
  local p = io.popen("gnuplot " .. shell_quote(script) .. " 2>&1")
  local msg = p:read("a")
  local ok = p:close()
  if not ok then error("plot: gnuplot failed on " .. script .. ":\n" .. msg, 0) end
  return out
end

function M.main(args)
  local run_dir, out
  local i = 1
  while i <= #args do
    local a = args[i]
    if a == "--out" then
      out = args[i + 1]
      i = i + 1
    elseif a == "-h" or a == "--help" then
      print("usage: ddplua plot RUN_DIR [--out FILE]")
      return
    elseif run_dir == nil then
      run_dir = a
    else
      error("plot: unexpected argument '" .. a .. "' (usage: ddplua plot RUN_DIR [--out FILE])", 0)
    end
    i = i + 1
  end
  if not run_dir then error("usage: ddplua plot RUN_DIR [--out FILE]", 0) end
  print("plot: wrote " .. M.plot(run_dir, { out = out }))
end

if ... ~= "ddplua.tools.plot" then
  M.main({ ... })
  return
end
return M

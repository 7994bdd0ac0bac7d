-- ddp.progress(total [, opts]): progress of a loop on rank 0.
--
--   local bar = ddp.progress(#loader, {desc = "epoch " .. epoch, batch_size = 64})
--   for x, y in loader:iter() do ...; bar:update(1, {loss = loss}) end
--   bar:close()
--
-- On a terminal (stdout is a tty and the launcher does not prefix lines with
-- the rank, i.e. DDPLUA_RANK_PREFIX is unset) it redraws one line in place:
--   epoch 1  45%|#########           | 212/469 [00:12<00:14, 1234.5 samples/s] loss=0.4321
-- Otherwise (a log file, a pipe, prefixed ranks) it prints a plain line every
-- `every` seconds (default 10) and one when it closes:
--   epoch 1: 212/469 (45%) 1234.5 samples/s, elapsed 00:12, ETA 00:14, loss=0.4321
-- The rate counts samples when their number is known (batch_size x steps, or
-- {samples = n} in update's values) and steps otherwise. Other ranks get an
-- object whose methods do nothing, so the loop needs no rank test.
local core = require "ddplua.core"
local rank = require "ddplua.rank"

local M = {}

local Bar = {}
Bar.__index = Bar

local OPTS = { desc = true, batch_size = true, every = true, out = true, tty = true, enabled = true, clock = true,
  width = true }

local function fmt_time(s)
  if s ~= s or s == math.huge or s < 0 then return "--:--" end
  s = math.floor(s + 0.5)
  local h, m, sec = s // 3600, (s % 3600) // 60, s % 60
  if h > 0 then return string.format("%d:%02d:%02d", h, m, sec) end
  return string.format("%02d:%02d", m, sec)
end

local function fmt_value(v)
  if core.is_tensor(v) then v = v:item() end
  if math.type(v) == "float" then return string.format("%.4g", v) end
  return tostring(v)
end

function M.new(total, opts)
  opts = opts or {}
  if total ~= nil and (math.type(total) ~= "integer" or total < 0) then
    error("progress: total must be a non-negative integer (or nil when unknown), got " .. tostring(total), 2)
  end
  for k in pairs(opts) do
    if not OPTS[k] then
      error("progress: unknown option '" .. tostring(k) ..
        "' (valid: desc, batch_size, every, out, tty, enabled, clock, width)", 2)
    end
  end
  local enabled = opts.enabled
  if enabled == nil then enabled = rank.is_main() end
  local tty = opts.tty
  if tty == nil then
    local prefixed = os.getenv("DDPLUA_RANK_PREFIX")
    tty = core.isatty(1) and (prefixed == nil or prefixed == "" or prefixed == "0")
  end
  local clock = opts.clock or core.clock
  local self = setmetatable({
    total = total, desc = opts.desc or "", batch_size = opts.batch_size, every = opts.every or 10,
    out = opts.out or io.stdout, tty = tty, enabled = enabled, clock = clock, width = opts.width or 20,
    steps = 0, samples = 0, values = {}, value_order = {}, closed = false,
  }, Bar)
  self.t0 = clock()
  self.last_draw = -math.huge
  self.last_line = self.t0
  return self
end

local function rate_text(self, elapsed)
  local count, unit = self.steps, "it/s"
  if self.samples > 0 then count, unit = self.samples, "samples/s" end
  if elapsed <= 0 then return "? " .. unit end
  return string.format("%.1f %s", count / elapsed, unit)
end

local function values_text(self)
  local parts = {}
  for _, k in ipairs(self.value_order) do parts[#parts + 1] = k .. "=" .. fmt_value(self.values[k]) end
  return table.concat(parts, " ")
end

local function eta(self, elapsed)
  if not self.total or self.steps == 0 then return math.huge end
  return elapsed / self.steps * math.max(self.total - self.steps, 0)
end

--- The text of the current state (terminal style when `tty`).
function Bar:line(tty)
  local elapsed = self.clock() - self.t0
  local vals = values_text(self)
  local desc = self.desc ~= "" and self.desc or nil
  if tty then
    local head
    if self.total and self.total > 0 then
      local frac = math.min(self.steps / self.total, 1)
      local filled = math.floor(frac * self.width + 1e-9)
      head = string.format("%3d%%|%s%s| %d/%d", math.floor(frac * 100 + 1e-9), string.rep("#", filled),
        string.rep(" ", self.width - filled), self.steps, self.total)
    else
      head = tostring(self.steps)
    end
    local s = string.format("%s%s [%s<%s, %s]", desc and desc .. " " or "", head, fmt_time(elapsed),
      fmt_time(eta(self, elapsed)), rate_text(self, elapsed))
    return vals ~= "" and s .. " " .. vals or s
  end
  local count = self.total and string.format("%d/%d (%d%%)", self.steps, self.total,
    self.total > 0 and math.floor(math.min(self.steps / self.total, 1) * 100 + 1e-9) or 100) or tostring(self.steps)
  local s = string.format("%s%s %s, elapsed %s", desc and desc .. ": " or "", count, rate_text(self, elapsed),
    fmt_time(elapsed))
  if self.total and not self.closed then s = s .. ", ETA " .. fmt_time(eta(self, elapsed)) end
  return vals ~= "" and s .. ", " .. vals or s
end

local function draw(self, final)
  local now = self.clock()
  if self.tty then
    if not final and now - self.last_draw < 0.1 then return end
    self.last_draw = now
    local text = self:line(true)
    -- pad over what the previous, possibly longer, line left behind
    local pad = math.max((self.drawn_len or 0) - #text, 0)
    self.drawn_len = #text
    self.out:write("\r", text, string.rep(" ", pad), final and "\n" or "")
    self.out:flush()
  elseif final or now - self.last_line >= self.every then
    self.last_line = now
    self.out:write(self:line(false), "\n")
    self.out:flush()
  end
end

--- update([steps = 1] [, values]): `steps` more done; values (a table of
--- numbers, tensors or strings) are shown after the counters; values.samples,
--- when given, counts samples instead of steps x batch_size.
function Bar:update(steps, values)
  if type(steps) == "table" and values == nil then steps, values = 1, steps end
  steps = steps or 1
  if math.type(steps) ~= "integer" or steps < 0 then
    error("progress:update: steps must be a non-negative integer, got " .. tostring(steps), 2)
  end
  if not self.enabled or self.closed then return end
  self.steps = self.steps + steps
  local samples = values and values.samples
  if samples ~= nil then self.samples = self.samples + samples
  elseif self.batch_size then self.samples = self.samples + steps * self.batch_size end
  if values then
    for k, v in pairs(values) do
      if k ~= "samples" then
        if self.values[k] == nil then self.value_order[#self.value_order + 1] = k end
        self.values[k] = v
      end
    end
    table.sort(self.value_order)
  end
  draw(self, false)
end

--- close([values]): the final line (elapsed time and the average rate).
function Bar:close(values)
  if not self.enabled or self.closed then return end
  if values then self:update(0, values) end
  self.closed = true
  draw(self, true)
end
Bar.__close = function(self) self:close() end

setmetatable(M, { __call = function(_, ...) return M.new(...) end })
return M

-- The adaptive pools beside nn.AdaptiveAvgPool2d (nn/adaptive_pool.lua), with PyTorch's windows: output position i
-- of n covers [floor(i L / n), ceil((i + 1) L / n)) of an input of size L:
--
--   nn.AdaptiveMaxPool2d(output_size), F.adaptive_max_pool2d(x, output_size): [N, C, H, W] or [C, H, W];
--     output_size n or {h, w}, nil in the pair keeps that size. Windows that tile the input evenly are one
--     max_pool2d; others a max over each window's rows, then over its columns (the max of a rectangle is separable).
--   nn.AdaptiveAvgPool1d(output_size), F.adaptive_avg_pool1d(x, output_size): [N, C, L] or [C, L], through the 2-d
--     pool on [.., 1, L].
--   nn.AdaptiveMaxPool1d(output_size), F.adaptive_max_pool1d(x, output_size): the same for the max.
--
-- Differences from PyTorch: return_indices=true is an error saying it is not supported; among equal values in a
-- window that does not tile evenly the gradient goes to the first maximum along the rows, then the columns (PyTorch:
-- the first in row-major order).
local ddp = require "ddplua"
local Module = require "ddplua.nn.module"
local util = require "ddplua.nn.util"
local E = require "ddplua.errors"

local M = { modules = {}, F = {} }
local F = M.F

local function check_input(who, x, dims)
  if not ddp.is_tensor(x) then E.raise(string.format("%s: expected a tensor input, got %s", who, type(x))) end
  if x:dim() ~= dims and x:dim() ~= dims + 1 then
    local what = dims == 2 and "[N, C, L] or [C, L]" or "[N, C, H, W] or [C, H, W]"
    E.raise(string.format("%s: expected a %d-D or %d-D input %s, got shape %s", who, dims + 1, dims, what,
      util.shape_str(x)))
  end
  for d = x:dim() - dims + 2, x:dim() do
    if x:size(d) < 1 then
      E.raise(string.format("%s: expected a non-empty input in its spatial dims, got shape %s", who,
        util.shape_str(x)))
    end
  end
end

-- output_size: n or (2-d) {h, w} with nil keeping the input's size; returns the list of sizes
local function sizes_of(who, output_size, x, n)
  local s = {}
  if type(output_size) == "table" then
    for i = 1, n do
      local v = output_size[i]
      s[i] = v == nil and x:size(x:dim() - n + i) or util.check_int(who, "output_size", v)
    end
  else
    local v = util.check_int(who, "output_size", output_size)
    for i = 1, n do s[i] = v end
  end
  return s
end

-- max over PyTorch's adaptive windows along dim d (size L -> n): one narrow and max per output position, then a cat
local function max_windows(x, d, n)
  local L = x:size(d)
  if n == L then return x end
  local parts = {}
  for i = 0, n - 1 do
    local lo, hi = (i * L) // n, -((-(i + 1) * L) // n) -- floor(i L / n), ceil((i + 1) L / n)
    parts[#parts + 1] = (x:narrow(d, lo + 1, hi - lo):max(d, true))
  end
  return ddp.cat(parts, d)
end

local function adaptive_max_pool2d(who, x, output_size, return_indices)
  util.unsupported(who, "return_indices", return_indices, false, "the pool returns its values only")
  check_input(who, x, 3)
  local s = sizes_of(who, output_size, x, 2)
  util.check_output_alloc(who, x, s)
  local H, W = x:size(-2), x:size(-1)
  if H % s[1] == 0 and W % s[2] == 0 then -- even tiles: one max_pool2d
    local k = { H // s[1], W // s[2] }
    return ddp.max_pool2d(x, k, k)
  end
  return max_windows(max_windows(x, x:dim() - 1, s[1]), x:dim(), s[2])
end

--- F.adaptive_max_pool2d(x, output_size [, return_indices = false])
function F.adaptive_max_pool2d(x, output_size, return_indices)
  return adaptive_max_pool2d("adaptive_max_pool2d", x, output_size, return_indices)
end

--- F.adaptive_max_pool1d(x, output_size [, return_indices = false])
function F.adaptive_max_pool1d(x, output_size, return_indices)
  check_input("adaptive_max_pool1d", x, 2)
  local n = sizes_of("adaptive_max_pool1d", output_size, x, 1)[1]
  return adaptive_max_pool2d("adaptive_max_pool1d", x:unsqueeze(-2), { 1, n }, return_indices):squeeze(-2)
end

--- F.adaptive_avg_pool1d(x, output_size)
function F.adaptive_avg_pool1d(x, output_size)
  check_input("adaptive_avg_pool1d", x, 2)
  local n = sizes_of("adaptive_avg_pool1d", output_size, x, 1)[1]
  return ddp.core.adaptive_avg_pool2d(x:unsqueeze(-2), { 1, n }):squeeze(-2)
end

local function pool_module(name, n, fn, settings)
  local cls = Module:extend(name)
  function cls:__init(output_size, ...)
    local o = util.args(name, settings, ...)
    util.unsupported(name, "return_indices", o.return_indices, false, "the pool returns its values only")
    if type(output_size) == "table" and n == 2 then
      for i = 1, 2 do
        if output_size[i] ~= nil then util.check_int(name, "output_size", output_size[i]) end
      end
      self.output_size = { output_size[1], output_size[2] }
    else
      self.output_size = util.check_int(name, "output_size", output_size)
    end
  end
  function cls:forward(x) return fn(x, self.output_size) end
  function cls:extra_repr()
    local s = self.output_size
    if type(s) == "table" then
      return string.format("output_size=(%s, %s)", tostring(s[1] or "None"), tostring(s[2] or "None"))
    end
    return "output_size=" .. s
  end
  M.modules[name] = cls
end

pool_module("AdaptiveMaxPool2d", 2, F.adaptive_max_pool2d, { "return_indices" })
pool_module("AdaptiveMaxPool1d", 1, F.adaptive_max_pool1d, { "return_indices" })
pool_module("AdaptiveAvgPool1d", 1, F.adaptive_avg_pool1d, {})

return M

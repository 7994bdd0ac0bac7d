-- nn.Dropout2d(p = 0.5 [, inplace]) and F.dropout2d(x, p = 0.5, training =
-- true): PyTorch's channel dropout. While training, each (sample, channel)
-- plane of x [N, C, ...] is zeroed with probability p and the kept ones are
-- scaled by 1 / (1 - p); the identity in eval mode (or at p = 0). As
-- PyTorch 1.13: the mask is drawn per entry of the first two dimensions, so
-- a 3-D input is [N, C, L] (it warns, as PyTorch does, that a later PyTorch
-- reads it as one unbatched [C, H, W]); 2-D and 5-D+ inputs are accepted
-- with PyTorch's deprecation warning; a 0-D or 1-D input is an error.
--
-- nn.Dropout3d(p = 0.5 [, inplace]) and F.dropout3d(x, p = 0.5, training =
-- true): the same over the channels of [N, C, D, H, W], or of an unbatched
-- [C, D, H, W] (one mask entry per channel); other ranks warn as PyTorch
-- 1.13 does and are read as unbatched unless 5-D.
local ddp = require "ddplua"
local Module = require "ddplua.nn.module"
local util = require "ddplua.nn.util"
local E = require "ddplua.errors"

local function check_p(who, p)
  if type(p) ~= "number" or not (p >= 0 and p <= 1) then
    E.raise(string.format("%s: probability p must be a number in [0, 1], got %s", who, tostring(p)))
  end
end

local warned = {}
local function warn_once(key, msg)
  if warned[key] then return end
  warned[key] = true
  io.stderr:write("ddplua: warning: " .. msg .. "\n")
end

-- x with the entries of its first `lead` dims zeroed with probability p (each a whole slice), the rest scaled by
-- 1 / (1 - p)
local function feature_dropout(x, lead, p, training)
  if not training or p == 0 then return x end
  if p == 1 then return x * 0 end
  local shape = {}
  for i = 1, x:dim() do shape[i] = i <= lead and x:size(i) or 1 end
  local keep = ddp.full(shape, 1 - p, { dtype = x:dtype(), device = x:device() }):bernoulli()
  return x * keep:div(1 - p)
end

local function dropout2d(x, p, training)
  if p == nil then p = 0.5 end
  if training == nil then training = true end
  check_p("dropout2d", p)
  if not ddp.is_tensor(x) then E.raise("dropout2d: expected a tensor, got " .. type(x)) end
  local nd = x:dim()
  if nd < 2 then
    E.raise(string.format("dropout2d: expected a 3-D [N, C, L] or 4-D [N, C, H, W] input, got %d-D %s", nd,
      tostring(x:size())))
  end
  if nd == 3 then
    warn_once(3, "dropout2d: a 3-D input is read as [N, C, L] (one mask per sample and channel), as PyTorch 1.13 " ..
      "does; a later PyTorch reads it as one unbatched [C, H, W]")
  elseif nd ~= 4 then
    warn_once(nd, string.format("dropout2d: a %d-D input is deprecated in PyTorch (use dropout); the mask is " ..
      "drawn per entry of its first two dimensions", nd))
  end
  return feature_dropout(x, 2, p, training)
end

local function dropout3d(x, p, training)
  if p == nil then p = 0.5 end
  if training == nil then training = true end
  check_p("dropout3d", p)
  if not ddp.is_tensor(x) then E.raise("dropout3d: expected a tensor, got " .. type(x)) end
  local nd = x:dim()
  if nd ~= 4 and nd ~= 5 then
    warn_once("3d" .. nd, string.format("dropout3d: a %d-D input is deprecated in PyTorch (use dropout); dropout3d " ..
      "is for [N, C, D, H, W] or unbatched [C, D, H, W] inputs", nd))
  end
  if nd < 1 then E.raise("dropout3d: expected a 4-D [C, D, H, W] or 5-D [N, C, D, H, W] input, got a 0-D tensor") end
  -- an input other than 5-D is unbatched: PyTorch adds the batch dim, so the mask is per entry of the first dim
  return feature_dropout(x, nd == 5 and 2 or 1, p, training)
end

local Dropout2d = Module:extend("Dropout2d")

function Dropout2d:__init(...)
  local opts = util.args("Dropout2d", { "p", "inplace" }, ...)
  local p = opts.p
  if p == nil then p = 0.5 end
  check_p("Dropout2d", p)
  self.p = p
end

function Dropout2d:forward(x) return dropout2d(x, self.p, self.training) end

function Dropout2d:extra_repr() return string.format("p=%g", self.p) end

local Dropout3d = Module:extend("Dropout3d")

function Dropout3d:__init(...)
  local opts = util.args("Dropout3d", { "p", "inplace" }, ...)
  local p = opts.p
  if p == nil then p = 0.5 end
  check_p("Dropout3d", p)
  self.p = p
end

function Dropout3d:forward(x) return dropout3d(x, self.p, self.training) end

function Dropout3d:extra_repr() return string.format("p=%g", self.p) end

return { Dropout2d = Dropout2d, dropout2d = dropout2d, Dropout3d = Dropout3d, dropout3d = dropout3d }

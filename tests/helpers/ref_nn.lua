-- Plain-Lua float64 references for the layer ops (convolution, pooling,
-- batch and layer norm, embedding, dropout), on the arrays of
-- helpers/ref.lua. Loops follow the textbook definitions, so they share no
-- code or trick with the kernels they check.
local R = require "helpers.ref"

local N = {}

local function out_size(n, k, s, p) return (n + 2 * p - k) // s + 1 end

-- x [N, C, H, W], w [O, C, kh, kw], b [O] or nil; stride, pad = {h, w}
function N.conv2d(x, w, b, stride, pad)
  local n_, c_, h, wd = table.unpack(x.shape)
  local o_, _, kh, kw = table.unpack(w.shape)
  local oh, ow = out_size(h, kh, stride[1], pad[1]), out_size(wd, kw, stride[2], pad[2])
  local out = R.array({ n_, o_, oh, ow })
  local k = 0
  for n = 1, n_ do
    for o = 1, o_ do
      for oy = 1, oh do
        for ox = 1, ow do
          local s = b and b.v[o] or 0
          for c = 1, c_ do
            for ki = 1, kh do
              local iy = (oy - 1) * stride[1] - pad[1] + ki
              if iy >= 1 and iy <= h then
                for kj = 1, kw do
                  local ix = (ox - 1) * stride[2] - pad[2] + kj
                  if ix >= 1 and ix <= wd then
                    s = s + R.get(x, { n, c, iy, ix }) * R.get(w, { o, c, ki, kj })
                  end
                end
              end
            end
          end
          k = k + 1
          out.v[k] = s
        end
      end
    end
  end
  return out
end

-- Pooling over the last two dims of x ([N, C, H, W] or [C, H, W]). Max
-- ignores padding; average divides by the whole window (padding counted).
local function pool(x, kernel, stride, pad, is_max)
  local nd = #x.shape
  local h, wd = x.shape[nd - 1], x.shape[nd]
  local oh, ow = out_size(h, kernel[1], stride[1], pad[1]), out_size(wd, kernel[2], stride[2], pad[2])
  local planes = R.numel(x.shape) // (h * wd)
  local shape = {}
  for d = 1, nd - 2 do shape[d] = x.shape[d] end
  shape[nd - 1], shape[nd] = oh, ow
  local out = R.array(shape)
  local k = 0
  for p = 0, planes - 1 do
    for oy = 1, oh do
      for ox = 1, ow do
        local acc = is_max and -math.huge or 0
        for ki = 1, kernel[1] do
          for kj = 1, kernel[2] do
            local iy, ix = (oy - 1) * stride[1] - pad[1] + ki, (ox - 1) * stride[2] - pad[2] + kj
            if iy >= 1 and iy <= h and ix >= 1 and ix <= wd then
              local v = x.v[p * h * wd + (iy - 1) * wd + ix]
              if is_max then acc = math.max(acc, v) else acc = acc + v end
            end
          end
        end
        k = k + 1
        out.v[k] = is_max and acc or acc / (kernel[1] * kernel[2])
      end
    end
  end
  return out
end

function N.max_pool2d(x, kernel, stride, pad) return pool(x, kernel, stride or kernel, pad or { 0, 0 }, true) end
function N.avg_pool2d(x, kernel, stride, pad) return pool(x, kernel, stride or kernel, pad or { 0, 0 }, false) end

-- Per-channel mean and biased variance of x [N, C, ...], and the count.
function N.channel_stats(x)
  local n_, c_ = x.shape[1], x.shape[2]
  local inner = R.numel(x.shape) // (n_ * c_)
  local mean, var = {}, {}
  for c = 1, c_ do
    local s = 0
    for n = 1, n_ do
      for i = 1, inner do s = s + x.v[((n - 1) * c_ + c - 1) * inner + i] end
    end
    mean[c] = s / (n_ * inner)
    local q = 0
    for n = 1, n_ do
      for i = 1, inner do q = q + (x.v[((n - 1) * c_ + c - 1) * inner + i] - mean[c]) ^ 2 end
    end
    var[c] = q / (n_ * inner)
  end
  return mean, var, n_ * inner
end

-- Returns y and the updated running mean / var (plain Lua lists, or nil).
function N.batch_norm(x, rm, rv, w, b, training, momentum, eps)
  momentum, eps = momentum or 0.1, eps or 1e-5
  local n_, c_ = x.shape[1], x.shape[2]
  local inner = R.numel(x.shape) // (n_ * c_)
  local mean, var, cnt = N.channel_stats(x)
  local new_rm, new_rv
  if rm then
    new_rm, new_rv = {}, {}
    for c = 1, c_ do
      if training then
        new_rm[c] = (1 - momentum) * rm.v[c] + momentum * mean[c]
        new_rv[c] = (1 - momentum) * rv.v[c] + momentum * var[c] * cnt / (cnt - 1)
      else
        new_rm[c], new_rv[c] = rm.v[c], rv.v[c]
      end
    end
  end
  if not training then mean, var = rm.v, rv.v end
  local y = R.array(x.shape)
  for n = 1, n_ do
    for c = 1, c_ do
      for i = 1, inner do
        local k = ((n - 1) * c_ + c - 1) * inner + i
        local v = (x.v[k] - mean[c]) / math.sqrt(var[c] + eps)
        y.v[k] = v * (w and w.v[c] or 1) + (b and b.v[c] or 0)
      end
    end
  end
  return y, new_rm, new_rv
end

-- Normalises over the last nd dims.
function N.layer_norm(x, nd, w, b, eps)
  eps = eps or 1e-5
  local cols = 1
  for d = #x.shape - nd + 1, #x.shape do cols = cols * x.shape[d] end
  local rows = R.numel(x.shape) // cols
  local y = R.array(x.shape)
  for r = 0, rows - 1 do
    local s = 0
    for j = 1, cols do s = s + x.v[r * cols + j] end
    local m, q = s / cols, 0
    for j = 1, cols do q = q + (x.v[r * cols + j] - m) ^ 2 end
    local rstd = 1 / math.sqrt(q / cols + eps)
    for j = 1, cols do
      y.v[r * cols + j] = (x.v[r * cols + j] - m) * rstd * (w and w.v[j] or 1) + (b and b.v[j] or 0)
    end
  end
  return y
end

-- ids array of 1-based rows, weight [num, dim] -> [ids shape..., dim]
function N.embedding(ids, weight)
  local dim = weight.shape[2]
  local shape = {}
  for d = 1, #ids.shape do shape[d] = ids.shape[d] end
  shape[#shape + 1] = dim
  local out = R.array(shape)
  for k, id in ipairs(ids.v) do
    for j = 1, dim do out.v[(k - 1) * dim + j] = weight.v[(id - 1) * dim + j] end
  end
  return out
end

-- ---- Philox 4x32-10 (Salmon et al.) on Lua's 64-bit integers ----
local M32 = 0xffffffff

local function mulhilo(a, b)
  local p = a * b -- wraps modulo 2^64: the bits of the unsigned product
  return p & M32, (p >> 32) & M32
end

function N.philox(seed, counter)
  local c0, c1, c2, c3 = counter & M32, (counter >> 32) & M32, 0, 0
  local k0, k1 = seed & M32, (seed >> 32) & M32
  for _ = 1, 10 do
    local lo0, hi0 = mulhilo(0xD2511F53, c0)
    local lo1, hi1 = mulhilo(0xCD9E8D57, c2)
    c0, c1, c2, c3 = hi1 ~ c1 ~ k0, lo1, hi0 ~ c3 ~ k1, lo0
    k0 = (k0 + 0x9E3779B9) & M32
    k1 = (k1 + 0xBB67AE85) & M32
  end
  return c0, c1, c2, c3
end

-- The 24-bit uniform of counter i (first word), as the kernels draw it.
function N.uniform24(seed, i) return (N.philox(seed, i) >> 8) * (1.0 / 16777216.0) end

local function to_f32(x) return (string.unpack("f", string.pack("f", x))) end

-- Dropout of array x with the generator at (seed, offset): element k is
-- kept when its uniform is >= p (p rounded to float32, as the kernel
-- compares), and scaled by 1 / (1 - p).
function N.dropout(x, p, seed, offset)
  local pf = to_f32(p)
  local out = R.array(x.shape)
  for k, v in ipairs(x.v) do
    out.v[k] = N.uniform24(seed, offset + k - 1) >= pf and v / (1 - p) or 0
  end
  return out
end

return N

-- Finite-difference gradient checks and float64 reference helpers for the
-- specs.
--
-- gradcheck(fn, inputs, opts) compares the gradient autograd computes for
-- sum(fn(inputs...) * w) (w a fixed random tensor, so every output element
-- is weighted differently) with central differences, element by element.
-- Inputs are contiguous float64 leaves; to check a non-contiguous or
-- broadcast case, let fn build the view from the leaf (x:transpose(1, 2),
-- x:expand(...)) so the view is what the op sees.
local ddp = require "ddplua"

local M = {}

local function flat_values(t)
  local out = {}
  local function walk(v)
    if type(v) == "table" then for _, e in ipairs(v) do walk(e) end else out[#out + 1] = v end
  end
  walk(t:totable())
  return out
end
M.flat_values = flat_values

--- Returns ok, message.
function M.gradcheck(fn, inputs, opts)
  opts = opts or {}
  local eps, atol, rtol = opts.eps or 1e-6, opts.atol or 1e-6, opts.rtol or 1e-5
  for i, x in ipairs(inputs) do
    assert(x:dtype() == "float64", "gradcheck input " .. i .. " must be float64")
    assert(x:is_contiguous(), "gradcheck input " .. i .. " must be contiguous (build views inside fn)")
  end
  -- analytic
  for _, x in ipairs(inputs) do x.grad = nil end
  local out = fn(table.unpack(inputs))
  local state = ddp.get_rng_state()
  ddp.manual_seed(1234)
  local w = ddp.randn(out:size(), { dtype = out:dtype() })
  ddp.set_rng_state(state)
  local function objective(o) return (o * w):sum() end
  objective(out):backward()
  local analytic = {}
  for i, x in ipairs(inputs) do
    if x.requires_grad then
      analytic[i] = x.grad and flat_values(x.grad) or nil
      if analytic[i] == nil then
        local z = {}
        for k = 1, x:numel() do z[k] = 0 end
        analytic[i] = z
      end
    end
  end
  -- numeric
  local worst, where = 0, nil
  for i, x in ipairs(inputs) do
    if x.requires_grad then
      local flat = x:view(-1)
      for k = 1, x:numel() do
        local orig = flat[k]:item()
        local fp, fm = ddp.no_grad(function()
          flat[k] = orig + eps
          local a = objective(fn(table.unpack(inputs))):item()
          flat[k] = orig - eps
          local b = objective(fn(table.unpack(inputs))):item()
          flat[k] = orig
          return a, b
        end)
        local num = (fp - fm) / (2 * eps)
        local ana = analytic[i][k]
        local err = math.abs(num - ana)
        local tol = atol + rtol * math.abs(num)
        if err > tol and err - tol > worst then
          worst = err - tol
          where = string.format("input %d element %d: analytic %.10g, numeric %.10g", i, k, ana, num)
        end
      end
    end
  end
  if where then return false, "gradient mismatch at " .. where end
  return true
end

--- Asserts a gradcheck passes (for busted specs).
function M.assert_gradcheck(fn, inputs, opts)
  local ok, msg = M.gradcheck(fn, inputs, opts)
  assert(ok, msg)
end

--- Max |a - b| over two tensors (or tensor and nested table), as numbers.
function M.max_abs_diff(a, b)
  local va = flat_values(a)
  local vb = type(b) == "table" and (function()
    local out = {}
    local function walk(v)
      if type(v) == "table" then for _, e in ipairs(v) do walk(e) end else out[#out + 1] = v end
    end
    walk(b)
    return out
  end)() or flat_values(b)
  assert(#va == #vb, string.format("element counts differ: %d vs %d", #va, #vb))
  local m = 0
  for k = 1, #va do
    local d = math.abs(va[k] - vb[k])
    if d ~= d then return math.huge end
    if d > m then m = d end
  end
  return m
end

--- A float64 tensor with deterministic values away from kinks (|x| >= 0.1),
--- for ops like relu/abs/max whose derivative jumps at 0 or at ties.
function M.smooth_input(shape, seed)
  local state = ddp.get_rng_state()
  ddp.manual_seed(seed or 7)
  local x = ddp.randn(shape, { dtype = "float64" })
  ddp.set_rng_state(state)
  local v = flat_values(x)
  for k = 1, #v do
    if math.abs(v[k]) < 0.1 then v[k] = v[k] < 0 and v[k] - 0.1 or v[k] + 0.1 end
  end
  local t = ddp.tensor(v, { dtype = "float64" }):view(shape)
  return t:clone():requires_grad_()
end

return M

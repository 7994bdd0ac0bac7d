-- F.affine_grid and F.grid_sample (nn/grid_sample.lua) against PyTorch 1.13's: every mode (bilinear, nearest) and
-- padding mode (zeros, border, reflection), align_corners both ways, grids reaching well outside [-1, 1], odd sizes
-- (one row, one column), values and the gradients to the input, the grid and theta in float64; the Spatial
-- Transformer tutorial's pipeline (affine_grid then grid_sample) end to end; bad arguments named.
local ddp = require "ddplua"
local R = require "helpers.ref"
local TR = require "helpers.torch_ref"
local F = ddp.nn.F

local function f64(...) return ddp.randn({ ... }, { dtype = "float64" }) end

describe("affine_grid and grid_sample", function()
  it("give PyTorch's values and gradients in every mode", function()
    ddp.manual_seed(41)
    local shapes = { { 2, 3, 5, 7 }, { 1, 2, 1, 6 }, { 2, 1, 4, 1 } }
    local inputs, cases, script = {}, {}, { "import torch, torch.nn.functional as F" }
    for si, s in ipairs(shapes) do
      inputs["x" .. si] = f64(table.unpack(s))
      inputs["g" .. si] = ddp.rand({ s[1], 4, 3, 2 }, { dtype = "float64" }) * 3 - 1.5 -- reaches outside [-1, 1]
      for _, mode in ipairs({ "bilinear", "nearest" }) do
        for _, pm in ipairs({ "zeros", "border", "reflection" }) do
          for _, ac in ipairs({ false, true }) do
            local k = #cases + 1
            cases[k] = { si, mode, pm, ac }
            inputs["gy" .. k] = f64(s[1], s[2], 4, 3)
            script[#script + 1] = string.format([[
x = T['x%d'].clone().requires_grad_(); g = T['g%d'].clone().requires_grad_()
y = F.grid_sample(x, g, mode='%s', padding_mode='%s', align_corners=%s); y.backward(T['gy%d'])
OUT['y%d'], OUT['gx%d'], OUT['gg%d'] = y, x.grad, g.grad]], si, si, mode, pm, ac and "True" or "False", k, k, k, k)
          end
        end
      end
    end
    local ref = TR.run(table.concat(script, "\n"), inputs)
    for k, c in ipairs(cases) do
      local what = string.format("shape %d %s %s align_corners %s", c[1], c[2], c[3], tostring(c[4]))
      local x, g = inputs["x" .. c[1]]:clone():requires_grad_(), inputs["g" .. c[1]]:clone():requires_grad_()
      local y = F.grid_sample(x, g, { mode = c[2], padding_mode = c[3], align_corners = c[4] })
      y:backward(inputs["gy" .. k])
      R.assert_close(y, R.from(ref["y" .. k]), 1e-12, 1e-12, what)
      R.assert_close(x.grad, R.from(ref["gx" .. k]), 1e-12, 1e-12, what .. ": input gradient")
      if c[2] == "nearest" then -- no gradient reaches the grid (PyTorch's: zeros)
        assert.is_nil(g.grad, what)
        assert.equal(0, R.tensor(R.from(ref["gg" .. k])):abs():sum():item(), what)
      else
        R.assert_close(g.grad, R.from(ref["gg" .. k]), 1e-10, 1e-10, what .. ": grid gradient")
      end
    end
  end)

  it("run the Spatial Transformer tutorial's pipeline as PyTorch's", function()
    ddp.manual_seed(42)
    local x, theta = f64(3, 1, 28, 28), f64(3, 2, 3) * 0.3 + ddp.tensor({ { 1, 0, 0 }, { 0, 1, 0 } }):double()
    local gy = f64(3, 1, 28, 28)
    local ref = TR.run([[
import torch, torch.nn.functional as F
x = T['x'].clone().requires_grad_(); th = T['theta'].clone().requires_grad_()
for ac in (False, True):
    grid = F.affine_grid(th, x.size(), align_corners=ac)
    y = F.grid_sample(x, grid, align_corners=ac)
    y.backward(T['gy'])
    OUT['grid%d' % ac], OUT['y%d' % ac] = grid, y
OUT['gx'], OUT['gth'] = x.grad, th.grad
]], { x = x, theta = theta, gy = gy })
    local xl, tl = x:clone():requires_grad_(), theta:clone():requires_grad_()
    for ac = 0, 1 do
      local grid = F.affine_grid(tl, xl:size(), ac == 1)
      local y = F.grid_sample(xl, grid, { align_corners = ac == 1 })
      y:backward(gy)
      R.assert_close(grid, R.from(ref["grid" .. ac]), 1e-12, 1e-12, "grid " .. ac)
      R.assert_close(y, R.from(ref["y" .. ac]), 1e-12, 1e-12, "y " .. ac)
    end
    R.assert_close(xl.grad, R.from(ref.gx), 1e-11, 1e-11, "input gradient")
    R.assert_close(tl.grad, R.from(ref.gth), 1e-9, 1e-9, "theta gradient")
    -- float32 runs too, and an empty batch gives an empty result
    assert.same({ 2, 1, 5, 5 }, F.grid_sample(ddp.randn(2, 1, 8, 8), F.affine_grid(ddp.randn(2, 2, 3), { 2, 1, 5, 5 })):size())
    assert.same({ 0, 1, 5, 5 }, F.grid_sample(ddp.randn(0, 1, 8, 8), ddp.randn(0, 5, 5, 2)):size())
  end)

  it("name bad arguments", function()
    local x, g = ddp.randn(1, 2, 4, 4), ddp.randn(1, 3, 3, 2)
    R.assert_errors({
      { function() return F.grid_sample(x, g, "bicubic") end, "mode must be 'bilinear' or 'nearest', got bicubic" },
      { function() return F.grid_sample(x, g, "bilinear", "wrap") end, "padding_mode must be" },
      { function() return F.grid_sample(ddp.randn(1, 2, 2, 4, 4), g) end, "expected a 4-D input" },
      { function() return F.grid_sample(x, ddp.randn(1, 3, 3, 3)) end, "expected a grid [1, Ho, Wo, 2]" },
      { function() return F.grid_sample(x, ddp.randn(2, 3, 3, 2)) end, "expected a grid [1, Ho, Wo, 2]" },
      { function() return F.grid_sample(x, g:double()) end, "one dtype" },
      { function() return F.grid_sample(x, g, { align_corners = 1 }) end, "align_corners must be true or false" },
      { function() return F.grid_sample(ddp.randn(1, 2, 0, 4), g) end, "has no pixels to sample" },
      { function() return F.affine_grid(ddp.randn(2, 2, 3), { 1, 1, 4, 4 }) end, "expected theta [1, 2, 3]" },
      { function() return F.affine_grid(ddp.randn(1, 2, 3), { 1, 1, 4 }) end, "size must be {N, C, H, W}" },
      { function() return F.affine_grid(ddp.randn(1, 2, 3), { 1, 1, -4, 4 }) end, "size[3]" },
      { function() return F.affine_grid(ddp.randn(1, 2, 3), { 1, 1, 1 << 40, 1 << 40 }) end, "affine_grid" },
    })
  end)
end)

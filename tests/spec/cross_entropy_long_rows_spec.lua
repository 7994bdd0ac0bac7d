-- cross_entropy and log_softmax over long rows (a language model's
-- vocabulary: exp_sum's float blocks of 1024 terms, then double) on every
-- float32 kernel set, against the float64 path: lengths on and off the
-- block and lane multiples, logits of scale 3 and 30 (most terms tiny).
local ddp = require "ddplua"
local R = require "helpers.ref"
local core = ddp.core

describe("cross_entropy over long rows", function()
  for _, isa in ipairs(R.cpu_kernel_sets()) do
    it(isa .. ": loss, gradient and log_softmax match float64", function()
      local prev = core.set_cpu_kernels(isa)
      local ok, err = pcall(function()
        for _, C in ipairs({ 31, 33, 1000, 1024, 1057, 2048, 10000, 40961 }) do
          for _, scale in ipairs({ 3, 30 }) do
            ddp.manual_seed(C + scale)
            local x64 = ddp.randn(3, C, { dtype = "float64" }):mul(scale)
            local x32 = x64:float():requires_grad_()
            local x64f = x32:detach():double():requires_grad_() -- the same values
            local t = ddp.randint(1, C, { 3 })
            local l32, l64 = ddp.cross_entropy(x32, t), ddp.cross_entropy(x64f, t)
            local what = string.format("%s C=%d scale=%g", isa, C, scale)
            assert.is_true(math.abs(l32:item() - l64:item()) <= 2e-6 * math.max(1, math.abs(l64:item())),
              what .. ": loss " .. l32:item() .. " vs " .. l64:item())
            l32:backward()
            l64:backward()
            local gd = (x32.grad:double() - x64f.grad):abs():max():item()
            assert.is_true(gd <= 1e-7, what .. ": gradient differs by " .. gd)
            local ls = (ddp.log_softmax(x32:detach(), 2):double() - ddp.log_softmax(x64f:detach(), 2)):abs():max():item()
            assert.is_true(ls <= 2e-6 * scale * 4, what .. ": log_softmax differs by " .. ls)
          end
        end
      end)
      core.set_cpu_kernels(prev)
      if not ok then error(err, 0) end
    end)
  end
end)

-- Shared by the GPU specs (tests/gpu/*_spec.lua, busted tag #gpu): skip
-- with the reason when no GPU is visible (fail instead when
-- DDPLUA_REQUIRE_GPU=1, as run_gpu_suite.sh sets), and compare tensors
-- across devices in float64.
local ddp = require "ddplua"

local H = {}
H.available, H.reason = ddp.cuda_is_available()
H.required = os.getenv("DDPLUA_REQUIRE_GPU") == "1"
H.device = H.available and ddp.device() or nil

--- H.setup(describe, it, pending): busted's functions live in the spec's
--- environment, not in this module's, so the spec hands them over.
function H.setup(describe, it, pending)
  --- describe(name, body) for a GPU group: body runs only with a GPU.
  function H.describe(name, body)
    describe(name .. " #gpu", function()
      if H.available then
        body()
      elseif H.required then
        it("needs a GPU", function() error("DDPLUA_REQUIRE_GPU=1 but " .. tostring(H.reason)) end)
      else
        pending("skipped, no GPU: " .. tostring(H.reason))
      end
    end)
  end
  return H
end

--- max |a - b| / (1 + |b|), both moved to the CPU in float64 (NaN if any).
function H.rel_diff(a, b)
  local x, y = a:to("cpu"):double(), b:to("cpu"):double()
  assert(x:dim() == y:dim(), "rank differs: " .. x:dim() .. " vs " .. y:dim())
  for d = 1, x:dim() do assert(x:size(d) == y:size(d), "size differs at dim " .. d) end
  if x:numel() == 0 then return 0 end
  return ((x - y):abs() / (y:abs() + 1)):max():item()
end

function H.assert_close(a, b, tol, what)
  local d = H.rel_diff(a, b)
  assert(d <= tol, string.format("%s: relative difference %.3g exceeds %.3g", what or "values", d, tol))
end

--- exact equality of values (dtype aside), on the CPU
function H.assert_equal(a, b, what)
  local x, y = a:to("cpu"), b:to("cpu")
  local tx, ty = x:totable(), y:totable()
  local function same(p, q)
    if type(p) ~= "table" or type(q) ~= "table" then return p == q or (p ~= p and q ~= q) end
    if #p ~= #q then return false end
    for i = 1, #p do if not same(p[i], q[i]) then return false end end
    return true
  end
  assert(same(tx, ty), (what or "values") .. ": the GPU and CPU results differ")
end

function H.ddplua_bin() return os.getenv("DDPLUA_BIN") or "./build/bin/ddplua" end

--- Runs a shell command; returns ok, combined output.
function H.run(cmd)
  local p = assert(io.popen(cmd .. " 2>&1"))
  local out = p:read("a")
  local ok = p:close()
  return ok == true, out
end

return H

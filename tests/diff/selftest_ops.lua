-- Ops for the differential suite's own spec (tests/spec/diff_suite_spec.lua, through DIFF_OPS_MODULE): one that
-- agrees with PyTorch, one whose ddplua side is wrong on purpose, one that kills its process and one that hangs.
-- The suite must count each as what it is, print reproducers and exit 1.
local function x_only(g)
  g:tensor("x", { g:int(1, 3), g:int(1, 3) }, "float64", { specials = false })
  return {}
end

return {
  { name = "agrees", lua = "x * 2", torch = "x * 2", gen = x_only },
  -- (conditioning: the recheck against PyTorch's perturbed float64 results runs, and must not excuse it)
  { name = "wrong", lua = "x * 2 + 1e-3", torch = "x * 2", conditioning = true, gen = x_only },
  { name = "dies", lua = "os.exit(3)", torch = "x * 2", grad = false, gen = x_only },
  { name = "hangs", lua = "(function() while true do end end)()", torch = "x * 2", grad = false, gen = x_only },
}

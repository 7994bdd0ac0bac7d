-- median_ms(ddp, runs, fn): fn's median wall time in ms over `runs` runs, after 3 untimed warm-up runs
-- (BLAS initialisation, oneDNN primitives, blocks for the allocator cache). Each run starts after a full
-- collection, untimed: the previous run's tensors go back to the allocator cache first, as PyTorch frees them
-- at once, so the figure is the op's steady-state cost, not the page faults of fresh memory.
return function(ddp, runs, fn)
  for _ = 1, 3 do fn() end
  local t = {}
  for i = 1, runs do
    collectgarbage()
    local t0 = ddp.clock()
    fn()
    t[i] = (ddp.clock() - t0) * 1e3
  end
  table.sort(t)
  return t[(runs + 1) // 2]
end

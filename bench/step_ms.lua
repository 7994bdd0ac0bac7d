-- step_ms(ddp, model, x, y, autocast, steps): ms per training step of model on the fixed batch (x, y): SGD (lr 0.01,
-- momentum 0.9) on CrossEntropyLoss, the forward and the loss under ddp.autocast("bfloat16") when autocast is true.
-- 3 untimed steps, then the best of 5 rounds of `steps`; a round ends when its last loss is read (the work is done).
return function(ddp, model, x, y, autocast, steps)
  local opt = ddp.optim.SGD(model:parameters(), { lr = 0.01, momentum = 0.9 })
  local criterion = ddp.nn.CrossEntropyLoss()
  local function step()
    opt:zero_grad()
    local loss
    do
      local _ <close> = autocast and ddp.autocast("bfloat16") or nil
      loss = criterion(model(x), y)
    end
    loss:backward()
    opt:step()
    return loss
  end
  for _ = 1, 3 do step() end
  local best = math.huge
  for _ = 1, 5 do
    local t0 = ddp.clock()
    for _ = 1, steps - 1 do step() end
    step():item()
    best = math.min(best, (ddp.clock() - t0) / steps)
  end
  return best * 1e3
end

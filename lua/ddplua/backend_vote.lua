-- The backend "auto" vote of one rank (used by distributed.lua; a module of its
-- own so that tests can ask it about machines they are not on).
--- This rank's "auto" vote: nccl when NCCL is usable and every rank on this
--- node has a GPU of its own (nccl needs one per rank), else cpu, which
--- carries CUDA tensors too (several ranks then share a GPU, staged through
--- host memory). The group is nccl only if every rank of the job votes for
--- it (init_process_group pools the votes). Returns the vote and, for the
--- fallback with GPUs present, a one-line note saying why. Pure, so that
--- tests can ask it about machines they are not on.
local function auto_vote(nccl_ok, gpus, local_ranks)
  if not nccl_ok then return "cpu" end
  if local_ranks and gpus and local_ranks > gpus then
    return "cpu", string.format("ddplua: backend auto: %d ranks on this node share %d GPU%s, and nccl needs one " ..
      "per rank: using the cpu group (CUDA tensors are staged through host memory)", local_ranks, gpus,
      gpus == 1 and "" or "s")
  end
  return "nccl"
end


return auto_vote

# The PyTorch side of examples/lstm_lm: pytorch/examples' word_language_model (LSTM) on the same tokens
# (the corpus.safetensors that examples/lstm_lm/train.lua writes), the same recipe and defaults.
#   python3 examples/lstm_lm/torch_lm.py runs/lstm_lm/corpus.safetensors [--epochs 3 --nhid 200 ...]
#   python3 examples/lstm_lm/torch_lm.py runs/lstm_lm/corpus.safetensors --nproc 2   # DDP (gloo), as ddplua --nproc 2
# prints the validation perplexity per epoch, the test perplexity and tokens/s (of all ranks). With --nproc N every
# rank takes its share of the batch columns (batch_size // N of them), as examples/lstm_lm/train.lua does under
# `ddplua --nproc N`, and DistributedDataParallel averages the gradients; one thread per rank.
import argparse, json, math, os, socket, struct, time
import torch, torch.nn as nn
import torch.distributed as dist

p = argparse.ArgumentParser()
p.add_argument("corpus")
for k, v in dict(emsize=200, nhid=200, nlayers=2, lr=20.0, clip=0.25, epochs=3, batch_size=20, bptt=35, dropout=0.2,
                 seed=1111, log_interval=200, nproc=1).items():
    p.add_argument("--" + k, type=type(v), default=v)
args = p.parse_args()
if args.nproc < 1 or args.batch_size % args.nproc:
    p.error("--nproc must be >= 1 and divide --batch_size")

def run(rank, world, port):
    if world > 1:
        dist.init_process_group("gloo", init_method="tcp://127.0.0.1:%d" % port, rank=rank, world_size=world)
    torch.manual_seed(args.seed)
    torch.set_num_threads(1)
    raw = open(args.corpus, "rb").read()
    n = struct.unpack("<Q", raw[:8])[0]
    header = json.loads(raw[8:8 + n])
    meta = header.pop("__metadata__")
    def tensor(name):
        b, e = header[name]["data_offsets"]
        return torch.frombuffer(bytearray(raw[8 + n + b:8 + n + e]), dtype=torch.int64) - 1  # ids are 1-based there
    ntokens = int(meta["vocab"])

    def batchify(d, bsz):
        nb = d.size(0) // bsz
        return d.narrow(0, 0, nb * bsz).view(bsz, -1).t().contiguous()
    train_data, val_data, test_data = batchify(tensor("train"), args.batch_size), batchify(tensor("valid"), 10), \
        batchify(tensor("test"), 10)
    per = args.batch_size // world  # this rank's columns
    train_data = train_data[:, rank * per:(rank + 1) * per].contiguous()

    class RNNModel(nn.Module):
        def __init__(self):
            super().__init__()
            self.drop = nn.Dropout(args.dropout)
            self.encoder = nn.Embedding(ntokens, args.emsize)
            self.rnn = nn.LSTM(args.emsize, args.nhid, args.nlayers, dropout=args.dropout)
            self.decoder = nn.Linear(args.nhid, ntokens)
            nn.init.uniform_(self.encoder.weight, -0.1, 0.1)
            nn.init.zeros_(self.decoder.bias)
            nn.init.uniform_(self.decoder.weight, -0.1, 0.1)
        def forward(self, x, hidden):
            out, hidden = self.rnn(self.drop(self.encoder(x)), hidden)
            return torch.log_softmax(self.decoder(self.drop(out)).view(-1, ntokens), dim=1), hidden
        def init_hidden(self, bsz):
            return (torch.zeros(args.nlayers, bsz, args.nhid), torch.zeros(args.nlayers, bsz, args.nhid))

    model, criterion = RNNModel(), nn.NLLLoss()
    # DDP averages the gradients in backward; evaluation runs the plain module on every rank
    train_model = nn.parallel.DistributedDataParallel(model) if world > 1 else model

    def get_batch(source, i):
        seq_len = min(args.bptt, len(source) - 1 - i)
        return source[i:i + seq_len], source[i + 1:i + 1 + seq_len].view(-1)

    def evaluate(source):
        model.eval()
        total, hidden = 0.0, model.init_hidden(10)
        with torch.no_grad():
            for i in range(0, source.size(0) - 1, args.bptt):
                x, y = get_batch(source, i)
                out, hidden = model(x, hidden)
                total += len(x) * criterion(out, y).item()
        return total / (len(source) - 1)

    lr, best, tokens, t_all = args.lr, None, 0, time.time()
    for epoch in range(1, args.epochs + 1):
        model.train()
        hidden = model.init_hidden(per)
        for batch, i in enumerate(range(0, train_data.size(0) - 1, args.bptt)):
            x, y = get_batch(train_data, i)
            model.zero_grad()
            hidden = tuple(h.detach() for h in hidden)
            out, hidden = train_model(x, hidden)
            loss = criterion(out, y)
            loss.backward()
            torch.nn.utils.clip_grad_norm_(model.parameters(), args.clip)
            for q in model.parameters():
                q.data.add_(q.grad, alpha=-lr)
            tokens += y.numel() * world
        val = evaluate(val_data)
        if rank == 0:
            print("| end of epoch %3d | valid loss %5.2f | valid ppl %8.2f" % (epoch, val, math.exp(val)), flush=True)
        if best is None or val < best:
            best = val
        else:
            lr /= 4.0
    secs = time.time() - t_all
    test = evaluate(test_data)
    if rank == 0:
        print("| end of training | test loss %5.2f | test ppl %8.2f | %.0f tokens/s" % (test, math.exp(test),
                                                                                  tokens / secs), flush=True)
    if world > 1:
        dist.destroy_process_group()


if __name__ == "__main__":
    if args.nproc == 1:
        run(0, 1, 0)
    else:
        with socket.socket() as sock:  # a free port for the ranks' rendezvous
            sock.bind(("127.0.0.1", 0))
            free_port = sock.getsockname()[1]
        torch.multiprocessing.spawn(run, args=(args.nproc, free_port), nprocs=args.nproc)

/* The files a `ddplua --watch` job watches (host.h, "watch.c"): the
 * script, the --config file and every file the script requires (the
 * workers report them, rerun.c).
 *
 * On Linux the host watches the files' directories with inotify rather
 * than the files themselves, because editors save in different ways: in
 * place (a write, then IN_CLOSE_WRITE), to a temporary file renamed over
 * the old one (IN_MOVED_TO on the watched name; a watch on the old file
 * would see nothing more), or by moving the old file away and writing a
 * new one (IN_MOVED_FROM / IN_CREATE / IN_CLOSE_WRITE). Any event on a
 * watched name marks the file; a while after the last such event the
 * marked files are read (SETTLE_MS after an event that ends a save, a file
 * closed after writing or renamed into place, so that files saved together
 * make one change; DEBOUNCE_MS after one in the middle of a save, a
 * creation or a move away), and those whose content differs from what was
 * last run (FNV-1a of the bytes) are the change — so the temporary files
 * of a save, a save that changes nothing, and the several events of one
 * save all count once or not at all. A file that is missing then (between
 * an editor's move and its write) is looked at again at the next event.
 *
 * Without inotify (or with DDPLUA_WATCH_POLL=1) the files are polled:
 * every POLL_MS their size, mtime and inode are compared with the last
 * ones, and a difference marks the file as an event would. */
#include <errno.h>
#include <fcntl.h>
#include <limits.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <sys/inotify.h>
#include <sys/stat.h>
#include <unistd.h>

#include "core/error.h"
#include "host/host.h"

enum { SETTLE_MS = 5, DEBOUNCE_MS = 25, POLL_MS = 100, MAX_FILES = 4096 };

typedef struct {
  char *path;       /* absolute */
  int dir;          /* index in dirs */
  const char *base; /* within path */
  uint64_t hash;    /* of the content last run; 0: missing */
  struct stat st;   /* polling: the last stat */
  bool marked;
} file;

typedef struct {
  char *path;
  int wd;
} dir;

struct dp_watch {
  int fd; /* inotify, -1 when polling */
  file *f;
  int nf, capf;
  dir *d;
  int nd, capd;
  int64_t settle_at; /* read the marked files then; -1: none marked */
  int64_t poll_at;
};

static uint64_t hash_file(const char *path) {
  int fd = open(path, O_RDONLY | O_CLOEXEC | O_NONBLOCK);
  if (fd < 0) return 0;
  struct stat st;
  if (fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    close(fd);
    return 0;
  }
  uint64_t h = 14695981039346656037ull;
  char buf[65536];
  for (ssize_t k; (k = read(fd, buf, sizeof buf)) > 0;)
    for (ssize_t i = 0; i < k; i++) h = (h ^ (uint8_t)buf[i]) * 1099511628211ull;
  close(fd);
  return h ? h : 1;
}

dp_watch *dp_watch_new(void) {
  dp_watch *w = dp_xcalloc(1, sizeof *w);
  w->settle_at = -1;
  const char *poll = getenv("DDPLUA_WATCH_POLL");
  w->fd = poll && strcmp(poll, "1") == 0 ? -1 : inotify_init1(IN_NONBLOCK | IN_CLOEXEC);
  return w;
}

void dp_watch_free(dp_watch *w) {
  if (!w) return;
  for (int i = 0; i < w->nf; i++) free(w->f[i].path);
  for (int i = 0; i < w->nd; i++) free(w->d[i].path);
  free(w->f);
  free(w->d);
  if (w->fd >= 0) close(w->fd);
  free(w);
}

const char *dp_watch_method(const dp_watch *w) { return w->fd >= 0 ? "inotify" : "polling"; }
int dp_watch_fd(const dp_watch *w) { return w->fd; }
int dp_watch_count(const dp_watch *w) { return w->nf; }

static int dir_of(dp_watch *w, const char *path) {
  for (int i = 0; i < w->nd; i++)
    if (strcmp(w->d[i].path, path) == 0) return i;
  if (w->nd == w->capd) {
    w->capd = w->capd ? 2 * w->capd : 8;
    w->d = dp_xrealloc(w->d, sizeof *w->d * (size_t)w->capd);
  }
  int wd = -1;
  if (w->fd >= 0)
    wd = inotify_add_watch(w->fd, path,
                           IN_CLOSE_WRITE | IN_MOVED_TO | IN_MOVED_FROM | IN_CREATE | IN_DELETE | IN_ATTRIB);
  w->d[w->nd] = (dir){dp_xstrdup(path), wd};
  return w->nd++;
}

int dp_watch_add(dp_watch *w, const char *path) {
  char abs[PATH_MAX];
  if (!realpath(path, abs)) return dp_error("cannot watch '%s': %s", path, strerror(errno));
  for (int i = 0; i < w->nf; i++)
    if (strcmp(w->f[i].path, abs) == 0) return 0;
  if (w->nf >= MAX_FILES) return dp_error("cannot watch '%s': %d files are watched already", path, MAX_FILES);
  if (w->nf == w->capf) {
    w->capf = w->capf ? 2 * w->capf : 16;
    w->f = dp_xrealloc(w->f, sizeof *w->f * (size_t)w->capf);
  }
  file *f = &w->f[w->nf];
  memset(f, 0, sizeof *f);
  f->path = dp_xstrdup(abs);
  char *slash = strrchr(f->path, '/');
  f->base = slash + 1;
  *slash = 0;
  f->dir = dir_of(w, slash == f->path ? "/" : f->path);
  *slash = '/';
  f->hash = hash_file(f->path);
  stat(f->path, &f->st);
  w->nf++;
  return 0;
}

static void mark(dp_watch *w, file *f, int64_t now, bool save_ended) {
  f->marked = true;
  w->settle_at = now + (save_ended ? SETTLE_MS : DEBOUNCE_MS);
}

static void read_events(dp_watch *w, int64_t now) {
  char buf[16384] __attribute__((aligned(__alignof__(struct inotify_event))));
  for (;;) {
    ssize_t k = read(w->fd, buf, sizeof buf);
    if (k <= 0) return;
    for (char *p = buf; p < buf + k;) {
      const struct inotify_event *e = (const struct inotify_event *)p;
      p += sizeof *e + e->len;
      if (e->mask & IN_Q_OVERFLOW) { /* events were lost: look at every file */
        for (int i = 0; i < w->nf; i++) mark(w, &w->f[i], now, false);
        continue;
      }
      if (!e->len) continue;
      for (int i = 0; i < w->nf; i++) {
        file *f = &w->f[i];
        if (w->d[f->dir].wd == e->wd && strcmp(f->base, e->name) == 0)
          mark(w, f, now, e->mask & (IN_CLOSE_WRITE | IN_MOVED_TO));
      }
    }
  }
}

static bool same_stat(const struct stat *a, const struct stat *b) {
  return a->st_ino == b->st_ino && a->st_size == b->st_size && a->st_mtim.tv_sec == b->st_mtim.tv_sec &&
         a->st_mtim.tv_nsec == b->st_mtim.tv_nsec;
}

static void poll_files(dp_watch *w, int64_t now) {
  for (int i = 0; i < w->nf; i++) {
    file *f = &w->f[i];
    struct stat st;
    if (stat(f->path, &st) != 0) memset(&st, 0, sizeof st);
    if (!same_stat(&st, &f->st)) {
      f->st = st;
      mark(w, f, now, false);
    }
  }
}

int dp_watch_timeout(const dp_watch *w, int64_t now) {
  int64_t at = w->settle_at;
  if (w->fd < 0 && (at < 0 || w->poll_at < at)) at = w->poll_at;
  if (at < 0) return -1;
  return at > now ? (int)(at - now) : 0;
}

bool dp_watch_check(dp_watch *w, int64_t now, char *changed, size_t n) {
  if (w->fd >= 0) read_events(w, now);
  else if (now >= w->poll_at) {
    poll_files(w, now);
    w->poll_at = now + POLL_MS;
  }
  if (w->settle_at < 0 || now < w->settle_at) return false;
  w->settle_at = -1;
  char cwd[PATH_MAX];
  size_t cwd_len = getcwd(cwd, sizeof cwd) ? strlen(cwd) : 0;
  size_t k = 0;
  changed[0] = 0;
  int count = 0;
  for (int i = 0; i < w->nf; i++) {
    file *f = &w->f[i];
    if (!f->marked) continue;
    f->marked = false;
    uint64_t h = hash_file(f->path);
    if (h == 0 || h == f->hash) continue; /* missing for now (mid-save), or the same bytes */
    f->hash = h;
    /* named relative to the current directory when it is below it */
    const char *shown = f->path;
    if (cwd_len > 1 && strncmp(f->path, cwd, cwd_len) == 0 && f->path[cwd_len] == '/') shown += cwd_len + 1;
    if (count++ < 4 && k < n) k += (size_t)snprintf(changed + k, n - k, "%s%s", k ? ", " : "", shown);
  }
  if (count > 4 && k < n) snprintf(changed + k, n - k, " and %d more", count - 4);
  return count > 0;
}

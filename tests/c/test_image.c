/* Image files, CSV lists and IDX files: PNG (every colour type libpng
 * writes: grey, grey + alpha, RGB, RGBA, palette with transparency, 1-bit,
 * 16-bit, interlaced) and JPEG decoding with channel conversion, the
 * writers, errors that name the file and the reason (missing, empty,
 * truncated, damaged, unsupported format), the CSV reader's quoting rules
 * and errors, IDX reading, and the transform pipeline's checks. */
#define _XOPEN_SOURCE 700
#include <ftw.h>
#include <png.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>
#include <zlib.h>

#include "core/error.h"
#include "data/image_csv.h"
#include "data/image_decode.h"
#include "data/image_transform.h"
#include "test_util.h"

static char dir[64];

static const char *tmp(const char *name) {
  static char buf[4][256];
  static int k;
  k = (k + 1) % 4;
  snprintf(buf[k], sizeof buf[k], "%s/%s", dir, name);
  return buf[k];
}

static int rm_entry(const char *p, const struct stat *sb, int flag, struct FTW *ftw) {
  (void)sb, (void)flag, (void)ftw;
  return remove(p);
}

static void write_file(const char *path, const void *data, size_t n) {
  FILE *f = fopen(path, "wb");
  CHECK(f != NULL);
  if (!f) return;
  if (n) CHECK(fwrite(data, 1, n, f) == n);
  fclose(f);
}

static size_t read_file(const char *path, unsigned char **data) {
  FILE *f = fopen(path, "rb");
  if (!f) return 0;
  fseek(f, 0, SEEK_END);
  long n = ftell(f);
  rewind(f);
  *data = malloc((size_t)n);
  size_t got = fread(*data, 1, (size_t)n, f);
  fclose(f);
  return got;
}

static bool has(const char *msg, const char *part) {
  if (strstr(msg, part)) return true;
  fprintf(stderr, "  message '%s' lacks '%s'\n", msg, part);
  return false;
}

static uint8_t pattern(int y, int x, int c) { return (uint8_t)((y * 37 + x * 11 + c * 71 + y * x) & 0xFF); }

static dp_image make_image(int h, int w, int c) {
  dp_image img = {h, w, c, malloc((size_t)h * w * c)};
  for (int y = 0; y < h; y++)
    for (int x = 0; x < w; x++)
      for (int k = 0; k < c; k++) img.data[((size_t)y * w + x) * c + k] = pattern(y, x, k);
  return img;
}

/* The conversion rules, written out per pixel as the reference. */
static void expect_pixel(const uint8_t *src, int sc, int dc, uint8_t *out) {
  bool grey = sc <= 2;
  uint8_t a = (sc == 2 || sc == 4) ? src[sc - 1] : 255;
  uint8_t r = src[0], g = grey ? src[0] : src[1], b = grey ? src[0] : src[2];
  if (dc == 1) out[0] = grey ? r : (uint8_t)((19595u * r + 38470u * g + 7471u * b + 0x8000u) >> 16);
  else {
    out[0] = r, out[1] = g, out[2] = b;
    if (dc == 4) out[3] = a;
  }
}

static void test_png_roundtrip(void) {
  for (int c = 1; c <= 4; c++) {
    dp_image img = make_image(9, 14, c);
    CHECK(dp_image_write_png(tmp("rt.png"), &img) == 0);
    int wants[] = {0, 1, 3, 4};
    for (int k = 0; k < 4; k++) {
      dp_image got;
      CHECK(dp_image_read(tmp("rt.png"), wants[k], &got) == 0);
      int dc = wants[k] ? wants[k] : c;
      CHECK(got.height == 9 && got.width == 14 && got.channels == dc);
      int bad = 0;
      for (int i = 0; i < 9 * 14; i++) {
        uint8_t e[4];
        if (wants[k] == 0) memcpy(e, img.data + i * c, (size_t)c);
        else expect_pixel(img.data + i * c, c, dc, e);
        bad += memcmp(e, got.data + i * dc, (size_t)dc) != 0;
      }
      CHECK(bad == 0);
      dp_image_free(&got);
    }
    dp_image_free(&img);
  }
}

/* PNG flavours only libpng's full API writes: palette + tRNS, 1-bit grey,
 * 16-bit grey, Adam7 interlacing. */
static void write_png_raw(const char *path, int w, int h, int color, int depth, int interlace, png_bytep *rows,
                          png_colorp palette, int npal, png_bytep trns, int ntrns) {
  FILE *f = fopen(path, "wb");
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, NULL, NULL, NULL);
  png_infop info = png_create_info_struct(png);
  if (setjmp(png_jmpbuf(png))) {
    CHECK(!"libpng failed writing a fixture");
    return;
  }
  png_init_io(png, f);
  png_set_IHDR(png, info, (png_uint_32)w, (png_uint_32)h, depth, color, interlace, PNG_COMPRESSION_TYPE_DEFAULT,
               PNG_FILTER_TYPE_DEFAULT);
  if (palette) png_set_PLTE(png, info, palette, npal);
  if (trns) png_set_tRNS(png, info, trns, ntrns, NULL);
  png_write_info(png, info);
  png_write_image(png, rows);
  png_write_end(png, NULL);
  png_destroy_write_struct(&png, &info);
  fclose(f);
}

static void test_png_flavours(void) {
  enum { W = 10, H = 6 };
  /* palette of 4 colours, colour 2 half transparent */
  png_color pal[4] = {{0, 0, 0}, {255, 0, 0}, {0, 128, 255}, {10, 20, 30}};
  png_byte trns[3] = {255, 255, 128};
  png_byte idx[H][W];
  png_bytep rows[H];
  for (int y = 0; y < H; y++) {
    for (int x = 0; x < W; x++) idx[y][x] = (png_byte)((x + y) % 4);
    rows[y] = idx[y];
  }
  write_png_raw(tmp("pal.png"), W, H, PNG_COLOR_TYPE_PALETTE, 8, PNG_INTERLACE_NONE, rows, pal, 4, trns, 3);
  dp_image got;
  CHECK(dp_image_read(tmp("pal.png"), 0, &got) == 0);
  CHECK(got.channels == 4); /* the tRNS chunk becomes alpha */
  int bad = 0;
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++) {
      int p = idx[y][x];
      uint8_t *px = got.data + ((size_t)y * W + x) * 4;
      bad += px[0] != pal[p].red || px[1] != pal[p].green || px[2] != pal[p].blue || px[3] != (p < 3 ? trns[p] : 255);
    }
  CHECK(bad == 0);
  dp_image_free(&got);

  /* 1-bit grey: bits expand to 0 / 255 */
  png_byte bits[H][2];
  for (int y = 0; y < H; y++) {
    bits[y][0] = (png_byte)(0xA5 ^ y);
    bits[y][1] = 0xC0;
    rows[y] = bits[y];
  }
  write_png_raw(tmp("bit.png"), W, H, PNG_COLOR_TYPE_GRAY, 1, PNG_INTERLACE_NONE, rows, NULL, 0, NULL, 0);
  CHECK(dp_image_read(tmp("bit.png"), 3, &got) == 0);
  bad = 0;
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++) {
      int bit = (bits[y][x / 8] >> (7 - x % 8)) & 1;
      for (int c = 0; c < 3; c++) bad += got.data[((size_t)y * W + x) * 3 + c] != (bit ? 255 : 0);
    }
  CHECK(bad == 0);
  dp_image_free(&got);

  /* 16-bit grey scales to 8 bits with rounding: v * 255 / 65535 */
  png_byte wide[H][2 * W];
  for (int y = 0; y < H; y++) {
    for (int x = 0; x < W; x++) {
      unsigned v = (unsigned)(y * 9000 + x * 700);
      wide[y][2 * x] = (png_byte)(v >> 8);
      wide[y][2 * x + 1] = (png_byte)v;
    }
    rows[y] = wide[y];
  }
  write_png_raw(tmp("w16.png"), W, H, PNG_COLOR_TYPE_GRAY, 16, PNG_INTERLACE_NONE, rows, NULL, 0, NULL, 0);
  CHECK(dp_image_read(tmp("w16.png"), 1, &got) == 0);
  bad = 0;
  for (int y = 0; y < H; y++)
    for (int x = 0; x < W; x++) {
      double want = (y * 9000 + x * 700) * 255.0 / 65535.0;
      bad += fabs(got.data[y * W + x] - want) > 0.5 + 1e-9;
    }
  CHECK(bad == 0);
  dp_image_free(&got);

  /* Adam7 interlaced RGB */
  dp_image img = make_image(H, W, 3);
  for (int y = 0; y < H; y++) rows[y] = img.data + (size_t)y * W * 3;
  write_png_raw(tmp("adam7.png"), W, H, PNG_COLOR_TYPE_RGB, 8, PNG_INTERLACE_ADAM7, rows, NULL, 0, NULL, 0);
  CHECK(dp_image_read(tmp("adam7.png"), 0, &got) == 0);
  CHECK(got.channels == 3 && memcmp(got.data, img.data, (size_t)H * W * 3) == 0);
  dp_image_free(&got);
  dp_image_free(&img);
}

static void test_jpeg(void) {
  /* smooth content survives JPEG at quality 100 within a few levels */
  for (int c = 1; c <= 3; c += 2) {
    dp_image img = {16, 24, c, malloc(16 * 24 * (size_t)c)};
    for (int i = 0; i < 16 * 24 * c; i++) img.data[i] = (uint8_t)(40 + (i / c) % 24 * 6 + (i % c) * 20);
    CHECK(dp_image_write_jpeg(tmp("q.jpg"), &img, 100) == 0);
    dp_image got;
    CHECK(dp_image_read(tmp("q.jpg"), 0, &got) == 0);
    CHECK(got.height == 16 && got.width == 24 && got.channels == c);
    int worst = 0;
    for (int i = 0; i < 16 * 24 * c; i++) {
      int d = abs(got.data[i] - img.data[i]);
      if (d > worst) worst = d;
    }
    CHECK(worst <= 3);
    dp_image_free(&got);
    /* grey from a colour JPEG is the luma of its decoded RGB */
    if (c == 3) {
      dp_image rgb, grey;
      CHECK(dp_image_read(tmp("q.jpg"), 3, &rgb) == 0);
      CHECK(dp_image_read(tmp("q.jpg"), 1, &grey) == 0);
      int bad = 0;
      for (int i = 0; i < 16 * 24; i++) {
        uint8_t e;
        expect_pixel(rgb.data + 3 * i, 3, 1, &e);
        bad += e != grey.data[i];
      }
      CHECK(bad == 0);
      dp_image_free(&rgb);
      dp_image_free(&grey);
    }
    dp_image_free(&img);
  }
  dp_image two = make_image(4, 4, 2);
  CHECK(dp_image_write_jpeg(tmp("two.jpg"), &two, 90) == -1);
  CHECK(has(dp_errmsg(), "2 channels"));
  CHECK(dp_image_write_jpeg(tmp("two.jpg"), &(dp_image){4, 4, 1, two.data}, 0) == -1);
  CHECK(has(dp_errmsg(), "quality 0"));
  dp_image_free(&two);
}

static void expect_read_error(const char *path, const char *part) {
  dp_image got;
  CHECK(dp_image_read(path, 3, &got) == -1);
  CHECK(got.data == NULL);
  CHECK(has(dp_errmsg(), path));
  CHECK(has(dp_errmsg(), part));
}

static void test_decode_errors(void) {
  expect_read_error(tmp("missing.png"), "No such file");
  write_file(tmp("empty.png"), "", 0);
  expect_read_error(tmp("empty.png"), "empty file");
  write_file(tmp("text.png"), "hello, world\n", 13);
  expect_read_error(tmp("text.png"), "unsupported format");
  write_file(tmp("anim.gif"), "GIF89a\x01\x00\x01\x00", 10);
  expect_read_error(tmp("anim.gif"), "GIF");

  /* truncated and damaged files made from valid ones */
  dp_image img = make_image(128, 128, 3);
  CHECK(dp_image_write_png(tmp("ok.png"), &img) == 0);
  CHECK(dp_image_write_jpeg(tmp("ok.jpg"), &img, 90) == 0);
  unsigned char *bytes;
  size_t n = read_file(tmp("ok.png"), &bytes);
  write_file(tmp("cut.png"), bytes, n / 2);
  expect_read_error(tmp("cut.png"), "corrupt PNG data: unexpected end of file (the file is truncated)");
  bytes[n / 2] ^= 0x5A; /* inside the image data: its CRC no longer matches */
  write_file(tmp("bent.png"), bytes, n);
  expect_read_error(tmp("bent.png"), "corrupt PNG data");
  free(bytes);
  n = read_file(tmp("ok.jpg"), &bytes);
  write_file(tmp("cut.jpg"), bytes, n * 2 / 3);
  expect_read_error(tmp("cut.jpg"), "corrupt JPEG data: Premature end of JPEG file");
  write_file(tmp("head.jpg"), bytes, 40); /* the header itself is cut */
  expect_read_error(tmp("head.jpg"), "corrupt JPEG data");
  free(bytes);
  dp_image_free(&img);

  dp_image got;
  CHECK(dp_image_read(tmp("ok.png"), 2, &got) == -1);
  CHECK(has(dp_errmsg(), "2 channels"));
  CHECK(dp_image_write_png("/nonexistent-dir/x.png", &(dp_image){2, 2, 1, (uint8_t[4]){0}}) == -1);
  CHECK(has(dp_errmsg(), "/nonexistent-dir/x.png"));
}

static void test_csv(void) {
  const char *text = "\xEF\xBB\xBFpath, label ,note\r\n"
                     "a.png,1,plain\r\n"
                     "\r\n"
                     "\"b,c.png\" , 2 ,\"say \"\"hi\"\"\"\n"
                     "\"multi\nline.png\",3,\n"
                     "  d.png  ,4,\"\"";
  write_file(tmp("ok.csv"), text, strlen(text));
  dp_image_csv c;
  CHECK(dp_image_csv_read(tmp("ok.csv"), &c) == 0);
  CHECK(c.ncols == 3 && c.nrows == 4);
  CHECK(strcmp(c.header[0], "path") == 0 && strcmp(c.header[1], "label") == 0);
  CHECK(dp_image_csv_column(&c, "label") == 1 && dp_image_csv_column(&c, "nope") == -1);
  const char *want[4][3] = {
      {"a.png", "1", "plain"}, {"b,c.png", "2", "say \"hi\""}, {"multi\nline.png", "3", ""}, {"d.png", "4", ""}};
  for (int r = 0; r < 4; r++)
    for (int k = 0; k < 3; k++) CHECK(strcmp(c.cells[r * 3 + k], want[r][k]) == 0);
  CHECK(c.lines[0] == 2 && c.lines[1] == 4 && c.lines[2] == 5 && c.lines[3] == 7);
  dp_image_csv_free(&c);

  struct {
    const char *text, *part;
  } bad[] = {
      {"path,label\na.png,1\nb.png\n", "row 2 (line 3) has 1 field but the header has 2"},
      {"path,label\na.png,1\n\"b.png,2\n", "line 3: quoted field opened here is never closed"},
      {"path,label\n\"a\"x.png,1\n", "line 2: unexpected 'x' after a closing quote"},
      {"path,path\n", "names column 'path' twice"},
      {"\n\n", "empty"},
  };
  for (size_t i = 0; i < sizeof bad / sizeof bad[0]; i++) {
    write_file(tmp("bad.csv"), bad[i].text, strlen(bad[i].text));
    CHECK(dp_image_csv_read(tmp("bad.csv"), &c) == -1);
    CHECK(has(dp_errmsg(), tmp("bad.csv")));
    CHECK(has(dp_errmsg(), bad[i].part));
  }
  /* a NUL byte inside a path field: the field's C string would end there and open a.png */
  static const char nul_text[] = "path,label\nb.png,1\na.png\0../../etc/x,2\n";
  write_file(tmp("bad.csv"), nul_text, sizeof nul_text - 1);
  CHECK(dp_image_csv_read(tmp("bad.csv"), &c) == -1);
  CHECK(has(dp_errmsg(), "line 3 holds a NUL byte"));
  CHECK(dp_image_csv_read(tmp("none.csv"), &c) == -1);
  CHECK(has(dp_errmsg(), "none.csv") && has(dp_errmsg(), "No such file"));
}

static void test_idx(void) {
  /* a small gzip'd IDX file written here, then the real Fashion-MNIST */
  gzFile g = gzopen(tmp("t.idx.gz"), "wb");
  unsigned char head[16] = {0, 0, 8, 3, 0, 0, 0, 5, 0, 0, 0, 2, 0, 0, 0, 3};
  gzwrite(g, head, 16);
  unsigned char body[30];
  for (int i = 0; i < 30; i++) body[i] = (unsigned char)(i * 7);
  gzwrite(g, body, 30);
  gzclose(g);
  int nd;
  int64_t dims[4];
  uint8_t *data;
  CHECK(dp_image_read_idx(tmp("t.idx.gz"), 4, &nd, dims, &data) == 0);
  CHECK(nd == 3 && dims[0] == 4 && dims[1] == 2 && dims[2] == 3);
  CHECK(memcmp(data, body, 24) == 0);
  free(data);
  write_file(tmp("short.idx"), head, 16);
  CHECK(dp_image_read_idx(tmp("short.idx"), -1, &nd, dims, &data) == -1);
  CHECK(has(dp_errmsg(), "short.idx") && has(dp_errmsg(), "truncated data"));
  head[2] = 0x0D; /* float32 */
  write_file(tmp("float.idx"), head, 16);
  CHECK(dp_image_read_idx(tmp("float.idx"), -1, &nd, dims, &data) == -1);
  CHECK(has(dp_errmsg(), "0x0d"));

  const char *fm = "/usr/share/datasets/fashion-mnist/t10k-images-idx3-ubyte.gz";
  CHECK(dp_image_read_idx(fm, 3, &nd, dims, &data) == 0);
  CHECK(nd == 3 && dims[0] == 3 && dims[1] == 28 && dims[2] == 28);
  free(data);
}

static void test_pipeline_checks(void) {
  dp_img_pipeline p = {.n = 2};
  p.step[0] = (dp_img_step){.op = DP_IMG_NORMALIZE, .n = 1, .mean = {0.5}, .std = {0.5}};
  p.step[1] = (dp_img_step){.op = DP_IMG_TO_TENSOR};
  CHECK(dp_img_pipeline_check(&p, 1, true) == -1);
  CHECK(has(dp_errmsg(), "transform 1 (Normalize): needs ToTensor before it"));
  p.step[0] = (dp_img_step){.op = DP_IMG_TO_TENSOR};
  p.step[1] = (dp_img_step){.op = DP_IMG_NORMALIZE, .n = 2, .mean = {0.5, 0.5}, .std = {0.5, 0.5}};
  CHECK(dp_img_pipeline_check(&p, 3, true) == -1);
  CHECK(has(dp_errmsg(), "2 means/stds for images with 3 channels"));
  CHECK(dp_img_pipeline_check(&p, 1, true) == -1);
  p.step[1] = (dp_img_step){.op = DP_IMG_TO_TENSOR};
  CHECK(dp_img_pipeline_check(&p, 3, true) == -1);
  CHECK(has(dp_errmsg(), "ToTensor already appears as transform 1"));
  p.n = 1;
  p.step[0] = (dp_img_step){.op = DP_IMG_RESIZE, .height = 4, .width = 4};
  CHECK(dp_img_pipeline_check(&p, 3, false) == 0);
  CHECK(dp_img_pipeline_check(&p, 3, true) == -1);
  CHECK(has(dp_errmsg(), "ToTensor() is missing"));

  /* output sizes: smaller-edge resize keeps the aspect (torchvision's int()) */
  p.n = 2;
  p.step[0] = (dp_img_step){.op = DP_IMG_RESIZE, .height = 10, .width = 0};
  p.step[1] = (dp_img_step){.op = DP_IMG_TO_TENSOR};
  int h, w;
  dp_img_output_size(&p, 30, 47, &h, &w);
  CHECK(h == 10 && w == 15);
  dp_img_output_size(&p, 47, 30, &h, &w);
  CHECK(h == 15 && w == 10);
  CHECK(!dp_img_fixed_size(&p, &h, &w));
  p.step[1] = (dp_img_step){.op = DP_IMG_RESIZE, .height = 7, .width = 9};
  CHECK(dp_img_fixed_size(&p, &h, &w) && h == 7 && w == 9);
}

int main(void) {
  strcpy(dir, "/tmp/ddplua_test_image_XXXXXX");
  if (!mkdtemp(dir)) return 1;
  test_png_roundtrip();
  test_png_flavours();
  test_jpeg();
  test_decode_errors();
  test_csv();
  test_idx();
  test_pipeline_checks();
  nftw(dir, rm_entry, 8, FTW_DEPTH | FTW_PHYS);
  TEST_DONE();
}

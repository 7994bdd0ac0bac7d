/* PNG and JPEG decoding to 8-bit HWC buffers, PNG and JPEG writing.
 *
 * Both libraries report fatal errors through a callback that must not
 * return; each decoder gives its library an error context whose callback
 * records the library's message and longjmps back to the decoder, which
 * frees what it allocated and turns the message into dp_error naming the
 * file. Locals written after setjmp and read after the longjmp are
 * volatile, as C requires. */
#include "data/image_decode.h"

#include <errno.h>
#include <png.h>
#include <setjmp.h>
#include <stdbool.h>
#include <stdio.h>
#include <stdlib.h>
#include <string.h>
#include <unistd.h>

#include <jerror.h>
#include <jpeglib.h>

#include "core/error.h"
#include "io/regular_file.h"

/* Decoded images larger than this are refused before allocating (a corrupt
 * header could otherwise ask for terabytes). */
#define MAX_IMAGE_BYTES ((size_t)1 << 31)

void dp_image_free(dp_image *img) {
  if (!img) return;
  free(img->data);
  img->data = NULL;
  img->height = img->width = img->channels = 0;
}

/* ITU-R 601-2 luma, the weights and rounding of PIL's convert("L"):
 * L = (19595 R + 38470 G + 7471 B + 2^15) >> 16. */
static inline uint8_t luma(const uint8_t *p) {
  return (uint8_t)((19595u * p[0] + 38470u * p[1] + 7471u * p[2] + 0x8000u) >> 16);
}

void dp_image_convert_channels(const uint8_t *src, int sc, uint8_t *dst, int dc, int64_t npix) {
  if (sc == dc) {
    memcpy(dst, src, (size_t)npix * (size_t)sc);
    return;
  }
  for (int64_t i = 0; i < npix; i++, src += sc, dst += dc) {
    bool grey = sc <= 2;
    uint8_t alpha = (sc == 2 || sc == 4) ? src[sc - 1] : 255;
    if (dc == 1) {
      dst[0] = grey ? src[0] : luma(src);
    } else {
      dst[0] = src[0];
      dst[1] = grey ? src[0] : src[1];
      dst[2] = grey ? src[0] : src[2];
      if (dc == 4) dst[3] = alpha;
    }
  }
}

/* Allocates the output buffer of `channels` for h x w, or fails naming the
 * size when it is absurd. */
static int check_size(const char *path, int64_t h, int64_t w, int channels) {
  if (h <= 0 || w <= 0) return dp_error("image '%s': corrupt header: size %lldx%lld", path, (long long)w, (long long)h);
  if ((size_t)h * (size_t)w * (size_t)(channels < 4 ? 4 : channels) > MAX_IMAGE_BYTES)
    return dp_error("image '%s': %lldx%lld pixels is larger than the 2 GiB this decoder accepts", path, (long long)w,
                    (long long)h);
  return 0;
}

/* Moves a decoded native buffer into *out, converting to `want` channels
 * (0 keeps the native count). Takes ownership of pix. */
static int finish(uint8_t *pix, int h, int w, int native, int want, dp_image *out) {
  if (want == 0 || want == native) {
    out->data = pix;
    out->channels = native;
  } else {
    out->data = dp_xmalloc((size_t)h * (size_t)w * (size_t)want);
    dp_image_convert_channels(pix, native, out->data, want, (int64_t)h * w);
    free(pix);
    out->channels = want;
  }
  out->height = h;
  out->width = w;
  return 0;
}

/* ---- PNG ---- */

typedef struct {
  jmp_buf jb;
  char msg[200];
} png_err_ctx;

static void png_on_error(png_structp png, png_const_charp msg) {
  png_err_ctx *c = png_get_error_ptr(png);
  snprintf(c->msg, sizeof c->msg, "%s", msg);
  longjmp(c->jb, 1);
}

/* Warnings (unknown chunks, an iCCP profile libpng dislikes) do not make the
 * pixels wrong; they are not worth failing a training run over. */
static void png_on_warning(png_structp png, png_const_charp msg) { (void)png, (void)msg; }

/* libpng's own reader says only "Read Error" when the file ends early. */
static void png_read_file(png_structp png, png_bytep out, size_t n) {
  FILE *f = png_get_io_ptr(png);
  if (fread(out, 1, n, f) != n)
    png_error(png, ferror(f) ? "read error" : "unexpected end of file (the file is truncated)");
}

static int read_png(FILE *f, const char *path, int want, dp_image *out) {
  png_err_ctx ec = {.msg = ""};
  png_structp png = png_create_read_struct(PNG_LIBPNG_VER_STRING, &ec, png_on_error, png_on_warning);
  png_infop info = png ? png_create_info_struct(png) : NULL;
  if (!info) {
    png_destroy_read_struct(png ? &png : NULL, NULL, NULL);
    return dp_error("image '%s': out of memory starting the PNG decoder", path);
  }
  uint8_t *volatile pix = NULL;
  png_bytep *volatile rows = NULL;
  if (setjmp(ec.jb)) {
    png_destroy_read_struct(&png, &info, NULL);
    free(pix);
    free(rows);
    return dp_error("image '%s': corrupt PNG data: %s", path, ec.msg);
  }
  png_set_read_fn(png, f, png_read_file);
  png_read_info(png, info);
  int color = png_get_color_type(png, info), depth = png_get_bit_depth(png, info);
  if (color == PNG_COLOR_TYPE_PALETTE) png_set_palette_to_rgb(png);
  if (color == PNG_COLOR_TYPE_GRAY && depth < 8) png_set_expand_gray_1_2_4_to_8(png);
  if (png_get_valid(png, info, PNG_INFO_tRNS)) png_set_tRNS_to_alpha(png);
  if (depth == 16) png_set_scale_16(png);
  png_set_interlace_handling(png);
  png_read_update_info(png, info);
  int h = (int)png_get_image_height(png, info), w = (int)png_get_image_width(png, info);
  int ch = png_get_channels(png, info);
  if (check_size(path, h, w, ch)) {
    png_destroy_read_struct(&png, &info, NULL);
    return -1;
  }
  size_t rowbytes = png_get_rowbytes(png, info);
  DP_ASSERT(rowbytes == (size_t)w * (size_t)ch);
  pix = dp_xmalloc((size_t)h * rowbytes);
  rows = dp_xmalloc((size_t)h * sizeof *rows);
  for (int y = 0; y < h; y++) rows[y] = pix + (size_t)y * rowbytes;
  png_read_image(png, rows);
  png_read_end(png, NULL); /* checks the trailing chunks: a truncated file is corrupt */
  png_destroy_read_struct(&png, &info, NULL);
  free(rows);
  return finish(pix, h, w, ch, want, out);
}

/* ---- JPEG ---- */

typedef struct {
  struct jpeg_error_mgr pub;
  jmp_buf jb;
  char msg[JMSG_LENGTH_MAX];
  bool corrupt; /* a warning that means the pixels are not what the file meant */
} jpeg_err_ctx;

static void jpeg_on_error(j_common_ptr cinfo) {
  jpeg_err_ctx *c = (jpeg_err_ctx *)cinfo->err;
  cinfo->err->format_message(cinfo, c->msg);
  longjmp(c->jb, 1);
}

/* libjpeg reports damaged data (a truncated file, a bad Huffman code) as
 * warnings and fills in grey; we make those errors. Stray bytes between
 * markers are common in camera files that decode fine, so they stay
 * warnings. */
static void jpeg_on_message(j_common_ptr cinfo, int level) {
  jpeg_err_ctx *c = (jpeg_err_ctx *)cinfo->err;
  if (level < 0 && cinfo->err->msg_code != JWRN_EXTRANEOUS_DATA && !c->corrupt) {
    c->corrupt = true;
    cinfo->err->format_message(cinfo, c->msg);
  }
}

static int read_jpeg(FILE *f, const char *path, int want, dp_image *out) {
  struct jpeg_decompress_struct cinfo;
  jpeg_err_ctx ec;
  cinfo.err = jpeg_std_error(&ec.pub);
  ec.pub.error_exit = jpeg_on_error;
  ec.pub.emit_message = jpeg_on_message;
  ec.corrupt = false;
  ec.msg[0] = 0;
  uint8_t *volatile pix = NULL;
  if (setjmp(ec.jb)) {
    jpeg_destroy_decompress(&cinfo);
    free(pix);
    return dp_error("image '%s': corrupt JPEG data: %s", path, ec.msg);
  }
  jpeg_create_decompress(&cinfo);
  jpeg_stdio_src(&cinfo, f);
  jpeg_read_header(&cinfo, TRUE);
  int native;
  if (cinfo.jpeg_color_space == JCS_GRAYSCALE) {
    cinfo.out_color_space = JCS_GRAYSCALE;
    native = 1;
  } else if (cinfo.jpeg_color_space == JCS_YCbCr || cinfo.jpeg_color_space == JCS_RGB) {
    /* Always RGB, even when grey is wanted: libjpeg's own grey output is the
     * luma plane before chroma upsampling, up to 6 levels away from what
     * PIL's open(...).convert("L") gives; converting the RGB matches it. */
    cinfo.out_color_space = JCS_RGB;
    native = 3;
  } else {
    J_COLOR_SPACE js = cinfo.jpeg_color_space;
    const char *cs = js == JCS_CMYK ? "CMYK" : js == JCS_YCCK ? "YCCK" : "unknown";
    jpeg_destroy_decompress(&cinfo);
    return dp_error("image '%s': unsupported JPEG colour space %s (expected greyscale or RGB/YCbCr)", path, cs);
  }
  jpeg_start_decompress(&cinfo);
  int h = (int)cinfo.output_height, w = (int)cinfo.output_width;
  DP_ASSERT(cinfo.output_components == native);
  if (check_size(path, h, w, native)) {
    jpeg_destroy_decompress(&cinfo);
    return -1;
  }
  size_t rowbytes = (size_t)w * (size_t)native;
  pix = dp_xmalloc((size_t)h * rowbytes);
  while (cinfo.output_scanline < cinfo.output_height) {
    JSAMPROW row = pix + (size_t)cinfo.output_scanline * rowbytes;
    jpeg_read_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_decompress(&cinfo);
  jpeg_destroy_decompress(&cinfo);
  if (ec.corrupt) {
    free(pix);
    return dp_error("image '%s': corrupt JPEG data: %s", path, ec.msg);
  }
  return finish(pix, h, w, native, want, out);
}

/* ---- format detection ---- */

static const char *guess_format(const uint8_t *b, size_t n) {
  if (n >= 6 && (memcmp(b, "GIF87a", 6) == 0 || memcmp(b, "GIF89a", 6) == 0)) return "a GIF image";
  if (n >= 2 && b[0] == 'B' && b[1] == 'M') return "a BMP image";
  if (n >= 4 && (memcmp(b, "II*\0", 4) == 0 || memcmp(b, "MM\0*", 4) == 0)) return "a TIFF image";
  if (n >= 4 && memcmp(b, "RIFF", 4) == 0) return "a RIFF (WebP?) file";
  return NULL;
}

int dp_image_read(const char *path, int channels, dp_image *out) {
  memset(out, 0, sizeof *out);
  if (channels != 0 && channels != 1 && channels != 3 && channels != 4)
    return dp_error("image '%s': cannot decode to %d channels (expected 1, 3 or 4)", path, channels);
  /* a FIFO or a device named by a CSV row would block a decode worker forever */
  FILE *f = dp_fopen_regular(path, NULL);
  if (!f) {
    char why[256];
    snprintf(why, sizeof why, "%s", dp_errmsg());
    return dp_error("image '%s': %s", path, why);
  }
  uint8_t sig[8];
  size_t n = fread(sig, 1, sizeof sig, f);
  int rc;
  if (n == 0) {
    rc = ferror(f) ? dp_error("image '%s': cannot read: %s", path, strerror(errno))
                   : dp_error("image '%s': empty file", path);
  } else if (n == 8 && png_sig_cmp(sig, 0, 8) == 0) {
    rewind(f);
    rc = read_png(f, path, channels, out);
  } else if (n >= 3 && sig[0] == 0xFF && sig[1] == 0xD8 && sig[2] == 0xFF) {
    rewind(f);
    rc = read_jpeg(f, path, channels, out);
  } else {
    const char *what = guess_format(sig, n);
    char hex[3 * 4 + 1] = "";
    for (size_t i = 0, k = 0; i < n && i < 4; i++)
      k += (size_t)snprintf(hex + k, sizeof hex - k, "%s%02x", i ? " " : "", sig[i]);
    rc = dp_error("image '%s': unsupported format: %s%s (PNG and JPEG are supported; the file starts with %s)", path,
                  what ? "it looks like " : "not a PNG or JPEG file", what ? what : "", hex);
  }
  fclose(f);
  return rc;
}

/* ---- writing ---- */

static int check_writable(const char *path, const dp_image *img, int max_channels) {
  if (!img->data || img->height <= 0 || img->width <= 0)
    return dp_error("writing image '%s': empty image (%dx%d)", path, img->width, img->height);
  if (img->channels < 1 || img->channels > max_channels || (max_channels == 3 && img->channels == 2))
    return dp_error("writing image '%s': %d channels cannot be written in this format (expected %s)", path,
                    img->channels, max_channels == 4 ? "1 to 4" : "1 or 3");
  return 0;
}

int dp_image_write_png(const char *path, const dp_image *img) {
  if (check_writable(path, img, 4)) return -1;
  FILE *f = fopen(path, "wb");
  if (!f) return dp_error("writing image '%s': cannot create: %s", path, strerror(errno));
  png_err_ctx ec = {.msg = ""};
  png_structp png = png_create_write_struct(PNG_LIBPNG_VER_STRING, &ec, png_on_error, png_on_warning);
  png_infop info = png ? png_create_info_struct(png) : NULL;
  png_bytep *volatile rows = NULL;
  if (!info || setjmp(ec.jb)) {
    png_destroy_write_struct(png ? &png : NULL, info ? &info : NULL);
    free(rows);
    fclose(f);
    unlink(path);
    return dp_error("writing image '%s': %s", path, info ? ec.msg : "out of memory");
  }
  static const int types[] = {0, PNG_COLOR_TYPE_GRAY, PNG_COLOR_TYPE_GRAY_ALPHA, PNG_COLOR_TYPE_RGB,
                              PNG_COLOR_TYPE_RGB_ALPHA};
  png_init_io(png, f);
  png_set_IHDR(png, info, (png_uint_32)img->width, (png_uint_32)img->height, 8, types[img->channels],
               PNG_INTERLACE_NONE, PNG_COMPRESSION_TYPE_DEFAULT, PNG_FILTER_TYPE_DEFAULT);
  png_write_info(png, info);
  rows = dp_xmalloc((size_t)img->height * sizeof *rows);
  size_t rowbytes = (size_t)img->width * (size_t)img->channels;
  for (int y = 0; y < img->height; y++) rows[y] = img->data + (size_t)y * rowbytes;
  png_write_image(png, rows);
  png_write_end(png, NULL);
  png_destroy_write_struct(&png, &info);
  free(rows);
  if (fclose(f) != 0) {
    unlink(path);
    return dp_error("writing image '%s': %s", path, strerror(errno));
  }
  return 0;
}

int dp_image_write_jpeg(const char *path, const dp_image *img, int quality) {
  if (check_writable(path, img, 3)) return -1;
  if (quality < 1 || quality > 100)
    return dp_error("writing image '%s': JPEG quality %d is not in 1..100", path, quality);
  FILE *f = fopen(path, "wb");
  if (!f) return dp_error("writing image '%s': cannot create: %s", path, strerror(errno));
  struct jpeg_compress_struct cinfo;
  jpeg_err_ctx ec;
  cinfo.err = jpeg_std_error(&ec.pub);
  ec.pub.error_exit = jpeg_on_error;
  ec.msg[0] = 0;
  if (setjmp(ec.jb)) {
    jpeg_destroy_compress(&cinfo);
    fclose(f);
    unlink(path);
    return dp_error("writing image '%s': %s", path, ec.msg);
  }
  jpeg_create_compress(&cinfo);
  jpeg_stdio_dest(&cinfo, f);
  cinfo.image_width = (JDIMENSION)img->width;
  cinfo.image_height = (JDIMENSION)img->height;
  cinfo.input_components = img->channels;
  cinfo.in_color_space = img->channels == 1 ? JCS_GRAYSCALE : JCS_RGB;
  jpeg_set_defaults(&cinfo);
  jpeg_set_quality(&cinfo, quality, TRUE);
  jpeg_start_compress(&cinfo, TRUE);
  size_t rowbytes = (size_t)img->width * (size_t)img->channels;
  while (cinfo.next_scanline < cinfo.image_height) {
    JSAMPROW row = img->data + (size_t)cinfo.next_scanline * rowbytes;
    jpeg_write_scanlines(&cinfo, &row, 1);
  }
  jpeg_finish_compress(&cinfo);
  jpeg_destroy_compress(&cinfo);
  if (fclose(f) != 0) {
    unlink(path);
    return dp_error("writing image '%s': %s", path, strerror(errno));
  }
  return 0;
}

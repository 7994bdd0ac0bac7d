/* Image files <-> 8-bit pixel buffers.
 *
 * Decoding reads PNG (libpng) and JPEG (libjpeg-turbo), recognised by their
 * signature bytes rather than the file name, into an interleaved HWC buffer
 * with the channel count the caller asks for:
 *   1: grey (colour is converted with the ITU-R 601 luma weights PIL's
 *      convert("L") uses; alpha is dropped),
 *   3: RGB (grey is replicated; alpha is dropped, as PIL's convert("RGB")),
 *   4: RGBA (opaque alpha added where the file has none),
 *   0: whatever the file holds (1, 2 = grey + alpha, 3 or 4).
 * PNG palettes, transparency chunks, 1/2/4-bit and 16-bit samples are
 * expanded to 8 bits. Errors name the file and the decoder's reason: a
 * missing file, corrupt or truncated data (a truncated JPEG is an error, not
 * a grey-filled image), an unsupported format, a path that is not a regular
 * file (a FIFO or a device would block the reading thread forever).
 *
 * Writing: PNG (8-bit grey, grey + alpha, RGB, RGBA), used by the example's
 * dataset generator, and JPEG (grey or RGB), used to make test fixtures. */
#ifndef DP_IMAGE_DECODE_H
#define DP_IMAGE_DECODE_H

#include <stdint.h>

typedef struct {
  int height, width, channels;
  uint8_t *data; /* height * width * channels bytes, rows top to bottom; malloc'ed */
} dp_image;

/* Decodes path into *out (channels 0, 1, 3 or 4, see above). On error
 * returns -1 with dp_errmsg() = "image '<path>': <reason>" and *out empty. */
int dp_image_read(const char *path, int channels, dp_image *out);
void dp_image_free(dp_image *img);

/* Converts an interleaved buffer between channel counts (1, 2, 3, 4 -> 1,
 * 3, 4) with the rules above; dst holds npix * dst_channels bytes. */
void dp_image_convert_channels(const uint8_t *src, int src_channels, uint8_t *dst, int dst_channels, int64_t npix);

/* Writes img as an 8-bit PNG (channels 1..4). */
int dp_image_write_png(const char *path, const dp_image *img);
/* Writes img as a baseline JPEG (channels 1 or 3), quality 1..100. */
int dp_image_write_jpeg(const char *path, const dp_image *img, int quality);

/* Reads an IDX file (the MNIST format), gzip-compressed or not, holding
 * unsigned bytes: *dims receives the sizes (at most 4), *data the first
 * `limit` entries along the first dimension (limit < 0: all of them) and
 * dims[0] is lowered to what was read. Errors name the file. */
int dp_image_read_idx(const char *path, int64_t limit, int *ndim, int64_t dims[4], uint8_t **data);

#endif

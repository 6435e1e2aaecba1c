/* proto/wire_dtype.h — bytes per element of each wire dtype (fgbuff.proto's Dtype, the same values
 * as client.h's fgb_dtype): the one table the client and the daemon both size tensors with. */
#ifndef FGB_PROTO_WIRE_DTYPE_H
#define FGB_PROTO_WIRE_DTYPE_H

#include <stdint.h>

/* Bytes per element of wire dtype dt (1 float32 ... 7 uint8), 0 for an unknown one. */
static inline uint32_t wire_dtype_size(uint32_t dt) {
  static const uint8_t size[] = {
      0, /* unspecified */
      4, /* float32 */
      2, /* float16 */
      2, /* bfloat16 */
      8, /* float64 */
      4, /* int32 */
      8, /* int64 */
      1, /* uint8 */
  };
  return dt < sizeof size / sizeof size[0] ? size[dt] : 0;
}

#endif

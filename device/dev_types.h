/* device/dev_types.h: the fixed-width scalar names shared by device code (OpenCL C) and the
 * host headers that declare kernel-argument structs, so one struct layout serves both. */
#ifndef HM_DEV_TYPES_H
#define HM_DEV_TYPES_H

#if defined(__OPENCL_C_VERSION__)
typedef uchar u8;
typedef ushort u16;
typedef uint u32;
typedef ulong u64;
typedef char i8;
typedef short i16;
typedef int i32;
typedef long i64;
#else
#include <stdint.h>
typedef uint8_t u8;
typedef uint16_t u16;
typedef uint32_t u32;
typedef uint64_t u64;
typedef int8_t i8;
typedef int16_t i16;
typedef int32_t i32;
typedef int64_t i64;
#endif
typedef float f32;

/* Kernel-argument structs hold device addresses as u64 (DESIGN §3) and are passed by
 * value. DEV_ARGS_CHECK pins a struct's size on both sides so a layout drift fails to build. */
#if defined(__OPENCL_C_VERSION__)
#define DEV_ARGS_CHECK(type, bytes) \
  typedef char dev_args_check_##type[(sizeof(struct type) == (bytes)) ? 1 : -1]
#else
#define DEV_ARGS_CHECK(type, bytes) \
  _Static_assert(sizeof(struct type) == (bytes), #type " layout changed")
#endif

#endif /* HM_DEV_TYPES_H */

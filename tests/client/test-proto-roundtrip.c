/* test-proto-roundtrip: every Envelope body type survives pack -> wire frame -> unpack with every
 * field equal. Fields are filled from the descriptors (so a field added to fgbuff.proto is covered
 * without editing this test) with distinct non-default values recomputed for the comparison. */
#include <fcntl.h>
#include <stdint.h>
#include <sys/socket.h>
#include <unistd.h>

#include "../test.h"
#include "fgbuff.pb-c.h"
#include "wire.h"

enum { FILL, CHECK_EQ };

static char strs[64][48];
static uint8_t blobs[64][48];
static uint64_t reps[64][3];
static int nstrs, nblobs, nreps;

/* The value a field of body `m` carries: distinct per body and field, never the default. */
static uint64_t val(uint32_t m, uint32_t f) {
  return 1000u * m + f;
}

static int visit(ProtobufCMessage *msg, uint32_t m, int mode) {
  const ProtobufCMessageDescriptor *d = msg->descriptor;
  int bad = 0;
  for (unsigned i = 0; i < d->n_fields; i++) {
    const ProtobufCFieldDescriptor *f = &d->fields[i];
    char *p = (char *)msg + f->offset;
    uint64_t v = val(m, f->id);
    if (f->label == PROTOBUF_C_LABEL_REPEATED) {
      REQUIRE(f->type == PROTOBUF_C_TYPE_UINT64); /* the only repeated type in v1 */
      size_t *n = (size_t *)((char *)msg + f->quantifier_offset);
      uint64_t **arr = (uint64_t **)p;
      if (mode == FILL) {
        uint64_t *r = reps[nreps++];
        for (int k = 0; k < 3; k++) r[k] = v + (uint64_t)k * (1ull << 40);
        *n = 3;
        *arr = r;
      } else {
        int ok = *n == 3;
        for (int k = 0; ok && k < 3; k++) ok = (*arr)[k] == v + (uint64_t)k * (1ull << 40);
        if (!ok) fprintf(stderr, "%s.%s differs\n", d->name, f->name), bad++;
      }
      continue;
    }
    int ok = 1;
    switch (f->type) {
      case PROTOBUF_C_TYPE_INT32:
        if (mode == FILL) *(int32_t *)p = -(int32_t)v;
        ok = *(int32_t *)p == -(int32_t)v;
        break;
      case PROTOBUF_C_TYPE_UINT32:
        if (mode == FILL) *(uint32_t *)p = (uint32_t)v;
        ok = *(uint32_t *)p == (uint32_t)v;
        break;
      case PROTOBUF_C_TYPE_UINT64:
        if (mode == FILL) *(uint64_t *)p = v | (1ull << 50);
        ok = *(uint64_t *)p == (v | (1ull << 50));
        break;
      case PROTOBUF_C_TYPE_DOUBLE:
        if (mode == FILL) *(double *)p = (double)v + 0.125;
        ok = *(double *)p == (double)v + 0.125;
        break;
      case PROTOBUF_C_TYPE_BOOL:
        if (mode == FILL) *(protobuf_c_boolean *)p = 1;
        ok = *(protobuf_c_boolean *)p == 1;
        break;
      case PROTOBUF_C_TYPE_ENUM: {
        const ProtobufCEnumDescriptor *ed = f->descriptor;
        int want = ed->values[ed->n_values - 1].value; /* the last, non-zero value */
        if (mode == FILL) *(int *)p = want;
        ok = want != 0 && *(int *)p == want;
        break;
      }
      case PROTOBUF_C_TYPE_STRING: {
        char want[48];
        snprintf(want, sizeof(want), "s%llu-\xc3\xbc", (unsigned long long)v);
        if (mode == FILL) {
          snprintf(strs[nstrs], sizeof(strs[0]), "%s", want);
          *(char **)p = strs[nstrs++];
        }
        ok = strcmp(*(char **)p, want) == 0;
        break;
      }
      case PROTOBUF_C_TYPE_BYTES: {
        ProtobufCBinaryData *b = (ProtobufCBinaryData *)p;
        size_t len = 5 + f->id % 7;
        if (mode == FILL) {
          for (size_t k = 0; k < len; k++) blobs[nblobs][k] = (uint8_t)(v + k * 37); /* has 0s */
          b->data = blobs[nblobs++];
          b->len = len;
        }
        ok = b->len == len;
        for (size_t k = 0; ok && k < len; k++) ok = b->data[k] == (uint8_t)(v + k * 37);
        break;
      }
      default:
        fprintf(stderr, "%s.%s: field type %d not covered by this test\n", d->name, f->name,
                (int)f->type);
        ok = 0;
    }
    if (!ok) fprintf(stderr, "%s.%s differs after the round trip\n", d->name, f->name), bad++;
  }
  return bad;
}

int main(void) {
  int sv[2];
  REQUIRE(socketpair(AF_UNIX, SOCK_STREAM, 0, sv) == 0);
  REQUIRE(fcntl(sv[1], F_SETFL, O_NONBLOCK) == 0);
  wire_reader rd;
  wire_reader_init(&rd);
  const ProtobufCMessageDescriptor *ed = &fgbuff__v1__envelope__descriptor;
  int bodies = 0;
  for (unsigned i = 0; i < ed->n_fields; i++) {
    const ProtobufCFieldDescriptor *bf = &ed->fields[i];
    if (bf->type != PROTOBUF_C_TYPE_MESSAGE) continue;
    bodies++;
    nstrs = nblobs = nreps = 0;
    const ProtobufCMessageDescriptor *md = bf->descriptor;
    ProtobufCMessage *body = calloc(1, md->sizeof_message);
    REQUIRE(body != NULL);
    md->message_init(body);
    visit(body, bf->id, FILL);
    Fgbuff__V1__Envelope env = FGBUFF__V1__ENVELOPE__INIT;
    env.req_id = 0x123456789ull + bf->id;
    env.num_fds = bf->id % 3;
    *(uint32_t *)((char *)&env + bf->quantifier_offset) = bf->id; /* body_case */
    *(ProtobufCMessage **)((char *)&env + bf->offset) = body;

    size_t len = fgbuff__v1__envelope__get_packed_size(&env);
    uint8_t *buf = malloc(len);
    REQUIRE(buf != NULL);
    CHECK(fgbuff__v1__envelope__pack(&env, buf) == len);
    CHECK(wire_send(sv[0], buf, (uint32_t)len, NULL, 0) == 0);
    const uint8_t *frame;
    uint32_t flen;
    int fds[FGB_WIRE_MAX_FDS], nfds;
    char err[256];
    REQUIRE(wire_read_wait(&rd, sv[1], 5000, &frame, &flen, fds, &nfds, err, sizeof(err)) ==
            WIRE_FRAME);
    CHECK(flen == len && nfds == 0);
    Fgbuff__V1__Envelope *got = fgbuff__v1__envelope__unpack(NULL, flen, frame);
    REQUIRE(got != NULL);
    CHECK_MSG((uint32_t)got->body_case == bf->id, "body %s came back as case %d", bf->name,
              (int)got->body_case);
    CHECK(got->req_id == env.req_id && got->num_fds == env.num_fds);
    ProtobufCMessage *gb = *(ProtobufCMessage **)((char *)got + bf->offset);
    REQUIRE(gb != NULL && gb->descriptor == md);
    CHECK_MSG(visit(gb, bf->id, CHECK_EQ) == 0, "body %s", bf->name);
    fgbuff__v1__envelope__free_unpacked(got, NULL);
    free(buf);
    free(body);
  }
  CHECK_MSG(bodies == 28, "expected the 28 body types of protocol v1, found %d", bodies);
  wire_reader_close(&rd);
  close(sv[0]);
  close(sv[1]);
  TEST_DONE();
}

// Test helper: sets every field of a proto message to a non-default value by
// walking its descriptor, so a conversion test covers a field added to the
// message later without being told of it. Values depend only on the field's
// number and a salt: two messages of one type filled with one salt agree.
// Used by the request conversion tests (tests/rpc, tests/worker).
#ifndef TANDEM_TESTS_RPC_PROTO_FILL_H_
#define TANDEM_TESTS_RPC_PROTO_FILL_H_

#include <gtest/gtest.h>

#include <cstdint>
#include <string>

#include "google/protobuf/descriptor.h"
#include "google/protobuf/message.h"

namespace tandem::rpc::testing {

void FillEveryField(google::protobuf::Message* m, int salt);

// Sets (or, for a repeated field, adds) a non-default value of `f` that
// depends only on `seed` (>= 0) and `i`, which tells the elements of a
// repeated field apart; a message value is filled by FillEveryField.
inline void FillField(google::protobuf::Message* m, const google::protobuf::FieldDescriptor* f,
                      int seed, int i) {
  using google::protobuf::FieldDescriptor;
  const google::protobuf::Reflection* r = m->GetReflection();
  const bool rep = f->is_repeated();
  const int n = 100 * seed + 10 * i + 1;  // never 0
  // Exact in binary, so floats survive any copy unchanged.
  const double x = 0.25 * n;
  switch (f->cpp_type()) {
    case FieldDescriptor::CPPTYPE_INT32:
      rep ? r->AddInt32(m, f, n) : r->SetInt32(m, f, n);
      break;
    case FieldDescriptor::CPPTYPE_INT64:
      rep ? r->AddInt64(m, f, n) : r->SetInt64(m, f, n);
      break;
    case FieldDescriptor::CPPTYPE_UINT32:
      rep ? r->AddUInt32(m, f, n) : r->SetUInt32(m, f, n);
      break;
    case FieldDescriptor::CPPTYPE_UINT64: {
      // Past 32 bits, so a narrowing copy shows.
      const uint64_t v = (uint64_t{1} << 40) + static_cast<uint64_t>(n);
      rep ? r->AddUInt64(m, f, v) : r->SetUInt64(m, f, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_FLOAT:
      rep ? r->AddFloat(m, f, static_cast<float>(x)) : r->SetFloat(m, f, static_cast<float>(x));
      break;
    case FieldDescriptor::CPPTYPE_DOUBLE:
      rep ? r->AddDouble(m, f, x) : r->SetDouble(m, f, x);
      break;
    case FieldDescriptor::CPPTYPE_BOOL:
      rep ? r->AddBool(m, f, true) : r->SetBool(m, f, true);
      break;
    case FieldDescriptor::CPPTYPE_STRING: {
      const std::string v = "s" + std::to_string(n);
      rep ? r->AddString(m, f, v) : r->SetString(m, f, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_ENUM: {
      // The last value: the first is the zero default.
      const google::protobuf::EnumDescriptor* e = f->enum_type();
      const int v = e->value(e->value_count() - 1)->number();
      rep ? r->AddEnumValue(m, f, v) : r->SetEnumValue(m, f, v);
      break;
    }
    case FieldDescriptor::CPPTYPE_MESSAGE: {
      // A map entry too: its key and value differ with `i`.
      google::protobuf::Message* sub = rep ? r->AddMessage(m, f) : r->MutableMessage(m, f);
      FillEveryField(sub, seed + 7 * i);
      break;
    }
  }
}

// Every field, repeated and map fields with two distinct elements, message
// fields recursively (none of Tandem's request messages nests itself).
inline void FillEveryField(google::protobuf::Message* m, int salt) {
  const google::protobuf::Descriptor* d = m->GetDescriptor();
  for (int k = 0; k < d->field_count(); ++k) {
    const google::protobuf::FieldDescriptor* f = d->field(k);
    // One member of a oneof at a time.
    const google::protobuf::OneofDescriptor* oneof = f->real_containing_oneof();
    if (oneof != nullptr && m->GetReflection()->HasOneof(*m, oneof)) continue;
    for (int i = 0; i < (f->is_repeated() ? 2 : 1); ++i) FillField(m, f, f->number() + salt, i);
  }
}

// Fails the test naming each field of `m` left at its default.
inline void ExpectEveryFieldSet(const google::protobuf::Message& m) {
  const google::protobuf::Descriptor* d = m.GetDescriptor();
  const google::protobuf::Reflection* r = m.GetReflection();
  for (int k = 0; k < d->field_count(); ++k) {
    const google::protobuf::FieldDescriptor* f = d->field(k);
    const bool set = f->is_repeated() ? r->FieldSize(m, f) > 0 : r->HasField(m, f);
    EXPECT_TRUE(set) << d->full_name() << "." << f->name() << " is not set";
  }
}

}  // namespace tandem::rpc::testing

#endif  // TANDEM_TESTS_RPC_PROTO_FILL_H_

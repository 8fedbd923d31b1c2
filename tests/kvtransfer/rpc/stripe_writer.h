// Test helper for fake Prefill services: serves a FetchKv request's stripe
// of encoded blocks (those whose index % stripes == stripe, in order), as
// the lease server does.
#ifndef TANDEM_TESTS_KVTRANSFER_RPC_STRIPE_WRITER_H_
#define TANDEM_TESTS_KVTRANSFER_RPC_STRIPE_WRITER_H_

#include <algorithm>
#include <string>
#include <vector>

#include <grpcpp/grpcpp.h>

#include "tandem/v1/worker.pb.h"

namespace tandem::kvtransfer::testing {

inline void WriteStripe(const std::vector<std::string>& blocks,
                        const tandem::v1::FetchKvRequest& request,
                        grpc::ServerWriter<tandem::v1::KvBlockMessage>* writer) {
  const size_t stripes = std::max(request.stripes(), 1);
  for (size_t i = request.stripe(); i < blocks.size(); i += stripes) {
    tandem::v1::KvBlockMessage m;
    m.set_index(static_cast<int32_t>(i));
    m.set_block(blocks[i]);
    writer->Write(m);
  }
}

}  // namespace tandem::kvtransfer::testing

#endif  // TANDEM_TESTS_KVTRANSFER_RPC_STRIPE_WRITER_H_

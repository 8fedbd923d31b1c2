// Whether a file changed, without reading it: its inode, size and
// modification time in one comparable string. A file replaced by rename (as
// a Kubernetes secret mount is updated) gets a new inode even when size and
// time agree. Stateless; any thread.
#ifndef TANDEM_COMMON_FILE_STAMP_H_
#define TANDEM_COMMON_FILE_STAMP_H_

#include <string>

namespace tandem::common {

// "" when `path` cannot be stat'ed.
std::string FileStamp(const std::string& path);

}  // namespace tandem::common

#endif  // TANDEM_COMMON_FILE_STAMP_H_

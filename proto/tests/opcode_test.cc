#include "proto/opcode.h"

#include <gtest/gtest.h>

#include <set>

namespace uroce::proto {
namespace {

TEST(OpcodeTable, RcAndUcShareSendAndWriteRowsExceptForTransportAndName) {
  for (uint8_t op = 0; op <= 0x0B; ++op) {
    const OpcodeInfo& rc = opcode_info(Opcode{op});
    const OpcodeInfo& uc = opcode_info(Opcode{static_cast<uint8_t>(0x20 | op)});
    ASSERT_TRUE(rc.valid() && uc.valid());
    EXPECT_EQ(rc.headers, uc.headers);
    EXPECT_EQ(rc.properties, uc.properties);
    EXPECT_EQ(rc.name.substr(3), uc.name.substr(3));
    EXPECT_EQ(rc.transport, Transport::kRc);
    EXPECT_EQ(uc.transport, Transport::kUc);
  }
  for (uint8_t op = 0x2C; op < 0x40; ++op) EXPECT_FALSE(opcode_info(Opcode{op}).valid()) << int(op);
}

TEST(OpcodeTable, ReceiveWqeConsumersAreSendsAndWritesWithImmediate) {
  for (const OpcodeInfo& row : kOpcodeTable) {
    if (!row.valid()) continue;
    const bool expected =
        row.operation == Operation::kSend || (row.operation == Operation::kRdmaWrite && row.is(kImmediate));
    EXPECT_EQ(row.is(kConsumesRecvWqe), expected) << row.name;
  }
}

TEST(OpcodeTable, OnlyRequestsCarryRequestHeadersAndOnlyResponsesCarryAeth) {
  for (const OpcodeInfo& row : kOpcodeTable) {
    if (!row.valid()) continue;
    if (row.carries(ExtHeader::kReth) || row.carries(ExtHeader::kAtomicEth) || row.carries(ExtHeader::kDeth)) {
      EXPECT_TRUE(row.is(kRequest)) << row.name;
    }
    if (row.carries(ExtHeader::kAeth)) {
      EXPECT_TRUE(row.is(kResponse)) << row.name;
    }
    EXPECT_FALSE(row.is(kRequest) && row.is(kResponse)) << row.name;
  }
}

TEST(OpcodeTable, SolicitedEventOnlyOnMessageEnds) {
  for (const OpcodeInfo& row : kOpcodeTable) {
    if (!row.valid() || !row.is(kSolicitable)) continue;
    EXPECT_TRUE(row.is(kLast) || row.is(kOnly)) << row.name;
  }
}

TEST(OpcodeTable, NamesAreUnique) {
  std::set<std::string_view> names;
  for (const OpcodeInfo& row : kOpcodeTable) {
    if (row.valid()) {
      EXPECT_TRUE(names.insert(row.name).second) << row.name;
    }
  }
}

}  // namespace
}  // namespace uroce::proto

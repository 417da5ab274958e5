// Prints the official A2A JavaScript SDK's own method names and error codes
// as JSON, for functions/a2a/names_test.go to compare with the door's
// tables (a rename upstream fails that test, not a caller).
import * as compat from "@a2a-js/sdk/compat/v0_3";
import { A2A_ERROR_CODE } from "@a2a-js/sdk/errors";

const legacy = Object.entries(compat)
  .filter(([k, v]) => k.startsWith("LEGACY_METHOD_") && typeof v === "string")
  .map(([, v]) => v)
  .sort();
const legacyToV1 = Object.fromEntries(legacy.map((m) => [m, compat.legacyJsonRpcToV1Method(m)]));
const candidates = JSON.parse(process.argv[2] ?? "[]");
const v1 = Object.fromEntries(candidates.map((m) => [m, compat.isV1JsonRpcMethod(m)]));
process.stdout.write(JSON.stringify({ legacyToV1, v1, errorCodes: A2A_ERROR_CODE }));

// The version of the input generators as a whole. Golden fixtures record it: a fixture made by
// another generator version holds inputs this build would not produce from the same case id.
// Bump it whenever any generator's output bits change for an existing case id (a new transform, a
// new stream name, a changed default); adding a new parameter value or a new op needs no bump.
#pragma once

namespace deltacheck::cases {

constexpr int kGeneratorVersion = 1;

}  // namespace deltacheck::cases

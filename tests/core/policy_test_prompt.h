#pragma once
// A TinyStories-style prompt of a few hundred stories260K tokens (room for 200 more in the 512 context), shared by the policy tests.
namespace kvevict::test {

inline constexpr const char* kPolicyTestStory =
    "Once upon a time, there was a little girl named Lily. She loved to play outside in the sunshine. "
    "One day, she saw a big red ball in the park. She ran to the ball and kicked it very high. The ball "
    "flew over the tree and landed in the pond. Lily was sad because she could not get her ball. Her "
    "friend Tom came and said, \"Don't be sad, Lily. I will help you.\" Tom found a long stick and pulled "
    "the ball out of the water. Lily was so happy. She hugged Tom and said thank you. "
    "The next day, Lily and Tom went to the park again. They saw a little dog with a blue hat. The dog "
    "was lost and it was crying. Lily said, \"Let's help the dog find its mom.\"";

}  // namespace kvevict::test
